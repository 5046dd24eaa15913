"""An xdist worker whose session has finished hears no SIGINT (``tests.worker_end``): execnet sends
one to a worker still in its last steps 5 s after the controller said exit, and its KeyboardInterrupt
landed in hypothesis's gc callback during pytest's final collection (sigint62).

A pytest run of one test in one worker, in a directory of its own, whose unconfigure sends that
SIGINT itself: waiting out execnet's 5 s would make the test that much slower for nothing more."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WAIT_S = 120.0  # a bound against a hung run on a loaded host; it takes a few seconds

CONFTEST = """
import os, pathlib, signal, time

def pytest_unconfigure(config):
    if getattr(config, "workerinput", None) is None:
        return
    out = pathlib.Path("end.txt")
    try:
        os.kill(os.getpid(), signal.SIGINT)  # what execnet sends a worker still finishing
        time.sleep(0.1)
        out.write_text("ran on")
    except KeyboardInterrupt:
        out.write_text("interrupted")
"""


def test_a_worker_in_its_last_steps_runs_on_through_a_sigint(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_one.py").write_text("def test_one():\n    pass\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [
        "-m",
        "pytest",
        "-q",
        "-n",
        "1",
        "-p",
        "tests.worker_end",
        "-p",
        "no:cacheprovider",
        "test_one.py",
    ]
    done = subprocess.run(
        [sys.executable, *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "end.txt").read_text() == "ran on"

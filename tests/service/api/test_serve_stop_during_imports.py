"""A SIGTERM or SIGINT that reaches ``rollout-scheduler serve`` while it still imports the app stops
it as one a moment later does: exit 0, no traceback, nothing left behind.

``serve`` installed its handlers (exit 0 by ``SystemExit``) only once it had imported the app:
6-17 s after the exec at load 11-15 on the 2-core dev host (exit51, docs/experiments.md), where a
SIGTERM (a ``docker compose stop``, a pod deleted as it starts) killed it by the signal: -15, 143 to
Kubernetes, a crash. The console script's entry (``service.cli.main``) now installs them first.

The child stands still as the app's module begins to import, and says so: the test signals it then,
whatever the host's load, and no sleep of the test's decides the outcome. It runs with the embedded
server (no ``REDIS_URL``) and a temporary dir of the test's own, which the stop must leave empty.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
# ``rollout-scheduler`` as the console script runs it, held still at the app's import
CHILD = """
import sys, time

class StandStill:
    def find_spec(self, name, path=None, target=None):
        if name == "service.app":
            sys.meta_path.remove(self)
            print("importing the app", flush=True)
            time.sleep(600)  # until the test's signal
        return None

sys.meta_path.insert(0, StandStill())
from service.cli import main
main()
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda sig: sig.name)
def test_serve_stopped_while_it_imports_the_app_exits_0_leaving_nothing(
    sig: signal.Signals, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("ROLLOUT_")}
    env.update(PYTHONPATH=str(ROOT), TMPDIR=str(tmp_path), ROLLOUT_MODEL_DIR=str(tmp_path / "models"))
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, "serve", "--port", "0"],  # never bound: stopped first
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "importing the app\n"
        child.send_signal(sig)
        _, err = child.communicate(timeout=120)
    finally:
        child.kill()
    assert child.returncode == 0, err[-2000:]
    assert "Traceback" not in err
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith("rollout-valkey-")] == []

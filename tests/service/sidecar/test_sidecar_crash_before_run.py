"""A sidecar that crashed before its run exits 1 with its crash logged, whatever stop signal meets the
crash's report: the early stop handlers are off once the crash leaves the command.

Why. Until its run's own handlers are in, a stop signal raises ``StoppedBeforeRunError`` (a clean
stop, exit 0: ``service.sidecar.early_stop``), unless an exception is in flight. A crash between the
logging's configure and the run's own catch (``_serve``'s imports: a broken install) left the command
with those handlers still in, and its report is the logging's hook (``service.logs``), run with no
exception in flight: a SIGTERM landing there raised the stop's ``SystemExit(0)`` from the hook, and
the interpreter exited 0 with nothing printed, a crash reported to Kubernetes as a clean stop
(finish56). It prints the counters line all the same, all zero, with the crash as its ``error``
(``test_crash_before_run_counters.py``).

The child is the real console script's entry; the step after the logging's configure raises, and the
logging's hook stands still as it reports the crash, until the test has signalled it (it says so
first), so the signal lands in the report whatever the host's load. Nothing connects: the crash comes
before the run.
"""

from __future__ import annotations

import json
import signal
import subprocess
from dataclasses import asdict
from pathlib import Path

import pytest

from service.sidecar.session_settings import SessionStats
from tests.service.api.serve_child import serve_child, signalled_after

pytestmark = pytest.mark.slow
WAIT_S = 120.0  # a bound against never, for a loaded host
CRASH = "RuntimeError: planted crash"
CHILD = """
import sys
from service import logs
from service.commands import sidecar

configure = logs.configure

def configured(*args, **kwargs):
    configure(*args, **kwargs)
    report = sys.excepthook  # the logging's, as configure installs it

    def reported_when_told(*args):
        print("reporting", flush=True)
        sys.stdin.readline()  # the test's word, once it has signalled
        report(*args)

    sys.excepthook = reported_when_told

def crashing(*args, **kwargs):
    raise RuntimeError("planted crash")

logs.configure, sidecar._serve = configured, crashing
from service.cli import main
sys.argv = ["rollout-scheduler", "sidecar", "--worker-id", "w0", "--engine-url", "http://127.0.0.1:9",
            "--redis-url", "redis://127.0.0.1:9/0"]
main()
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda sig: sig.name)
def test_a_stop_signal_meeting_a_crash_before_the_run_leaves_its_status_and_its_report(
    sig: signal.Signals, tmp_path: Path
) -> None:
    child = serve_child(CHILD, [], tmp_path)
    line = _counters_line(child)
    out, err = signalled_after(child, "reporting\n", sig, WAIT_S)
    assert child.returncode == 1, err[-2000:]
    assert "uncaught RuntimeError: planted crash" in err, err[-2000:]
    assert "before the run started: stopped" not in err, err[-2000:]  # not taken for an early stop
    assert out == ""  # nothing after the report
    # the counters line, all zero (nothing ran), with the crash as its error, as every failed exit's
    counters = json.loads(line)
    assert counters == {"worker_id": "w0", **asdict(SessionStats()), "error": CRASH}


def _counters_line(child: subprocess.Popen[str]) -> str:
    """The child's first line on stdout, printed before the crash's report; the child killed and the
    test failed where the report's own line comes first (no counters line: it would wait forever)."""
    assert child.stdout is not None
    first = child.stdout.readline()
    if not first.startswith("{"):
        child.kill()
        child.wait()
        pytest.fail(f"no counters line before the crash's report: {first!r}")
    return first

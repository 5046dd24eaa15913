"""A ``serve`` that crashed before its exit guard was enabled exits 1 with its traceback, whatever stop
signal meets the crash on its way out: the signal is logged, and the status stays the crash's.

Why. ``serve``'s handler (``service.cli.exit_cleanly``) takes the first stop signal as the start of a
clean exit (``SystemExit(0)``) unless an exit is already under way (``exit_begun``). ``run`` marked its
exit begun only in the ``finally`` of its ``try``, which began after the logging's configure, the
settings' warnings and the open-file limit's raise, and the command's checks came before ``run``: a
crash in any of them went out unmarked, and a SIGTERM meeting it on its way out (a ``finally``, a
context's exit, the command line's close) raised ``SystemExit(0)`` over it. The process exited 0, no
traceback printed: a replica that never served, and its crash hidden, reported as stopped cleanly
(exit55's leftover).

The child is the real console script's entry; its open-file limit's raise (``run``'s last step
before the guard) or its port's check (the command's, before ``run``) raises, and a ``finally``
around the step stands still as the crash leaves it, until the test has signalled it (it says so
first), so the signal meets the crash on its way out whatever the host's load.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from service.cli import UNSIGNALLED_EXIT_LOG
from tests.service.api.serve_child import serve_child, signalled_after

pytestmark = pytest.mark.slow
WAIT_S = 120.0  # a bound against never, for a loaded host
CHILD = """
import functools
import sys
from service.commands import serve

def crashing(*args, **kwargs):
    raise RuntimeError("planted crash")

def held(step):
    @functools.wraps(step)  # the command's options are read from its signature
    def step_then_stand_still(*args, **kwargs):
        try:
            step(*args, **kwargs)
        finally:  # the crash on its way out of the step
            print("unwinding", flush=True)
            sys.stdin.readline()  # the test's word, once it has signalled
    return step_then_stand_still

if sys.argv.pop() == "run":  # the open-file limit's raise: run's last step before the guard
    serve.raise_open_file_limit, serve.run = crashing, held(serve.run)
else:  # the port's check: the command's, before run
    serve.port_taken, serve.serve = crashing, held(serve.serve)
from service.cli import main
sys.argv = ["rollout-scheduler", "serve", "--port", "0"]
main()
"""


@pytest.mark.parametrize(
    ("where", "sig"),
    [("run", signal.SIGTERM), ("run", signal.SIGINT), ("checks", signal.SIGTERM)],
    ids=["run-SIGTERM", "run-SIGINT", "checks-SIGTERM"],
)
def test_a_stop_signal_meeting_a_crash_before_the_guard_leaves_its_status_and_traceback(
    where: str, sig: signal.Signals, tmp_path: Path
) -> None:
    child = serve_child(CHILD, [where], tmp_path)
    _, err = signalled_after(child, "unwinding\n", sig, WAIT_S)
    assert child.returncode == 1, err[-2000:]
    assert "RuntimeError: planted crash" in err, err[-2000:]
    assert [UNSIGNALLED_EXIT_LOG in line for line in err.splitlines()].count(True) == 1, err[-2000:]
    assert list(tmp_path.iterdir()) == []  # nothing was started, so nothing is left behind

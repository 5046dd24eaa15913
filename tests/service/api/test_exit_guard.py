"""A replica whose planning thread is inside a Redis call at the stop exits within its bound
(``service/api/exit_guard.py``), not when the call ends.

The process's exit joins every thread that is no daemon, and a planning thread ends the Redis call
it is in before anything else: on a stalled Redis Cluster up to 7 command timeouts (stop49), and a
call that Redis does not answer at all held the exit until the kubelet's SIGKILL. ``serve`` runs in a
child whose publish is a ``BLPOP`` that never returns (``tests/service/api/stuck_call.py``); the test
sends SIGTERM once it is under way. Main's child never exited (the test's bound against never ends
it); now it ends, naming the thread it did not wait for, with the status of an exit it forced
(``FORCED_STATUS``, 70: stop50; it was 0, an ordinary stop's). No duration is asserted.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from service.api import exit_guard
from service.api.exit_guard import EXIT_LOG, FORCED_STATUS, arm
from service.embedded import EmbeddedServer
from tests.service.api.stopped_child import CUT_AFTER_S, began, serving
from tests.service.api.stuck_call import STARTED, URL
from tests.service.api.stuck_post import post_stuck

pytestmark = pytest.mark.slow
STUCK = "tests.service.api.stuck_call"  # serve, its publish a call that never returns
WAIT_S = 90.0  # a bound against never, for a loaded host: the guard's is 5 s past the graceful wait


def test_a_planning_thread_in_a_call_that_never_returns_does_not_hold_the_exit(
    server: EmbeddedServer, tmp_path: Path
) -> None:
    started = tmp_path / "started"
    planted = {STARTED: str(started), URL: server.url}  # where the stuck call says it began, its server
    with serving(STUCK, server.url, tmp_path, 1, WAIT_S, CUT_AFTER_S, **planted) as (proc, url):
        post_stuck(url, WAIT_S)
        began(started, proc, WAIT_S)
        proc.send_signal(signal.SIGTERM)
        _, logged = proc.communicate(timeout=WAIT_S)
    lines = [line for line in logged.splitlines() if EXIT_LOG in line]
    assert (proc.returncode, len(lines)) == (FORCED_STATUS, 1), logged
    assert "AnyIO worker thread" in lines[0], logged


def test_an_app_run_outside_serve_arms_no_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test process's own apps stop too (``TestClient``): nothing may end it. A guard armed by
    mistake sleeps for good here (a daemon), so it fails this test: with its real sleep it ended the
    test process 5 s on, the failure report with it (mutants13)."""
    monkeypatch.setattr(exit_guard, "time", SimpleNamespace(sleep=lambda _: threading.Event().wait()))
    monkeypatch.setattr(exit_guard, "_armed", None)
    assert arm(0.0) is None

"""A second stop signal during ``serve``'s exit is logged and the exit goes on to the status it would
have had; a third ends the process at once, as a passed bound does (status 70, the embedded server
ended with its dir).

``serve``'s handler (``service.cli.exit_cleanly``) raised ``SystemExit`` at every signal. The first
starts the exit; a second one (a terminal's second Ctrl-C, a supervisor's SIGTERM after Kubernetes')
raised again wherever the exit was waiting: in the interpreter's join of a planning thread stuck on
Redis, the join was cut and the process ended 0 before the guard's bound, where the stuck call
would have made it 70 with the guard's WARNING (exit52); in the embedded server's stop, the stop was
cut with the server's watcher already disarmed, and a third cut the finalizer's stop again: exit 0,
the server left running for good, its dir kept. Each signal here is sent once the child is where
the exit waits, which the child or the server shows; no sleep of the test's decides the outcome, and
no duration is asserted.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from service import cli
from service.api import exit_guard
from service.api.exit_guard import EXIT_LOG, FORCED_STATUS, SIGNALLED_LOG
from service.cli import SECOND_SIGNAL_LOG, UNSIGNALLED_EXIT_LOG, exit_cleanly
from service.embedded import EmbeddedServer
from tests.service.api.guard_stand import stood_guard
from tests.service.api.serve_embedded import its_server_stalled
from tests.service.api.stopped_child import began, closed
from tests.service.api.stuck_post import stopped_while_stuck
from tests.service.polling import GONE_WITHIN_S, gone_within, removed_within

WAIT_S = 90.0  # a bound against never, for a loaded host: the guard's is 5 s past the graceful wait
# the embedded case's command timeout: the guard's bound is 4 of them (12 s) past the app's stop, far
# past the test's steps between its first signal and its third, so the guard does not fire first
STALLED_TIMEOUT_S = 3
SIGTERM_BIT = 1 << (signal.SIGTERM - 1)  # in /proc/<pid>/status's pending-signal masks


def _lines(logged: str, message: str) -> list[str]:
    return [line for line in logged.splitlines() if message in line]


@pytest.mark.slow
@pytest.mark.parametrize("second", [signal.SIGTERM, signal.SIGINT], ids=lambda sig: sig.name)
def test_a_second_signal_while_the_exit_joins_a_stuck_thread_keeps_the_guards_status(
    second: signal.Signals, server: EmbeddedServer, tmp_path: Path
) -> None:
    with stopped_while_stuck(server.url, tmp_path, WAIT_S, signal.SIGTERM) as (proc, _, joining):
        began(joining, proc, WAIT_S)  # uvicorn's wait is over: the exit joins the stuck thread
        proc.send_signal(second)
        _, logged = proc.communicate(timeout=WAIT_S)
    assert (proc.returncode, len(_lines(logged, EXIT_LOG))) == (FORCED_STATUS, 1), logged
    assert len(_lines(logged, SECOND_SIGNAL_LOG)) == 1, logged
    assert "Traceback" not in logged


def _said(proc: subprocess.Popen[str], message: str) -> None:
    """Until ``proc``'s log says ``message``; fails if it ends first."""
    assert proc.stderr is not None
    heard = ""
    while message not in heard:
        heard = proc.stderr.readline()
        assert heard, f"serve ended without saying {message!r}"


@pytest.mark.slow
def test_three_signals_during_uvicorns_wait_end_the_process_at_the_third(
    server: EmbeddedServer, tmp_path: Path
) -> None:
    """uvicorn's handler hears the stop signals while it waits for the request in flight (stuck for
    good): the third ends the process then, as ``exit_cleanly``'s third does, not the guard's bound
    after the graceful wait. Counted apart, uvicorn's three were one (exit53)."""
    # the default graceful wait (10 s): the second and third signals must come while uvicorn waits
    with stopped_while_stuck(server.url, tmp_path, WAIT_S, signal.SIGTERM, graceful_s=None) as (proc, url, _):
        closed(url, WAIT_S)  # uvicorn heard the first: its wait for the stuck request is under way
        proc.send_signal(signal.SIGTERM)
        _said(proc, SECOND_SIGNAL_LOG)  # heard apart from the third, not merged with it while pending
        proc.send_signal(signal.SIGTERM)
        _, logged = proc.communicate(timeout=WAIT_S)
    assert (proc.returncode, len(_lines(logged, SIGNALLED_LOG))) == (FORCED_STATUS, 1), logged
    assert _lines(logged, EXIT_LOG) == [], logged  # the third's end, not the guard's


def _sigterm_pending(pid: int) -> bool:
    """Whether a SIGTERM waits on stopped process ``pid`` (the embedded server's stop has sent it)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, mask = line.partition(":")
        if name in ("SigPnd", "ShdPnd") and int(mask, 16) & SIGTERM_BIT:
            return True
    return False


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the child's processes from /proc")
def test_a_third_signal_ends_the_exit_at_once_and_the_stalled_embedded_server_with_it(tmp_path: Path) -> None:
    with its_server_stalled(tmp_path, STALLED_TIMEOUT_S, WAIT_S) as (proc, server, data_dir):
        proc.send_signal(signal.SIGTERM)
        while not _sigterm_pending(server):  # the exit is in the embedded server's stop
            assert proc.poll() is None, "serve ended before it stopped its server"
        proc.send_signal(signal.SIGTERM)
        _said(proc, SECOND_SIGNAL_LOG)
        proc.send_signal(signal.SIGINT)
        _, logged = proc.communicate(timeout=WAIT_S)
        assert (proc.returncode, len(_lines(logged, SIGNALLED_LOG))) == (FORCED_STATUS, 1), logged
        assert gone_within(server, GONE_WITHIN_S), "the embedded server outlived serve"
        assert removed_within(data_dir, GONE_WITHIN_S), f"{data_dir} outlived serve"


def test_the_handler_exits_at_the_first_signal_logs_the_second_and_forces_at_the_third(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    stood = stood_guard(monkeypatch)
    monkeypatch.setattr(exit_guard, "_last_acts", ())
    monkeypatch.setattr(cli, "_heard", 0)
    monkeypatch.setattr(cli, "_begun", False)
    with pytest.raises(SystemExit) as first:
        exit_cleanly(signal.SIGTERM, None)
    exit_cleanly(signal.SIGINT, None)  # returns: the exit goes on
    assert (first.value.code, stood.status, _lines(caplog.text, SECOND_SIGNAL_LOG) != []) == (0, [], True)
    exit_cleanly(signal.SIGTERM, None)
    assert (stood.status, _lines(caplog.text, SIGNALLED_LOG) != []) == ([FORCED_STATUS], True)


@pytest.mark.parametrize("decided", ["fired", "exited"])
def test_a_forcing_signal_leaves_an_exit_whose_status_is_decided_as_it_ends(
    decided: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard fired (it ends the process within its last acts, with its own WARNING), or the exit's
    last wait ended within the bound (it ends 0): a third signal then adds nothing."""
    stood = stood_guard(monkeypatch)
    if decided == "fired":
        exit_guard._fired.set()
    else:
        monkeypatch.setattr(exit_guard, "_exited", True)
    exit_guard.force("SIGTERM")
    assert stood.status == []


def test_signals_uvicorn_heard_count_toward_the_third(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """uvicorn heard two (the second logged), and raises neither again as its run ends: the next one
    is the third, and forces."""
    stood = stood_guard(monkeypatch)
    monkeypatch.setattr(exit_guard, "_last_acts", ())
    monkeypatch.setattr(cli, "_heard", 0)
    cli.heard_while_serving(signal.SIGINT)
    cli.heard_while_serving(signal.SIGINT)
    assert (stood.status, len(_lines(caplog.text, SECOND_SIGNAL_LOG))) == ([], 1)
    exit_cleanly(signal.SIGINT, None)
    assert (stood.status, _lines(caplog.text, SIGNALLED_LOG) != []) == ([FORCED_STATUS], True)


def test_a_signal_in_an_exit_begun_otherwise_is_logged_and_the_third_forces(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The exit began with no stop signal (a failed startup, a crash): the first one heard starts
    nothing (logged), the second is logged, the third forces."""
    stood = stood_guard(monkeypatch)
    monkeypatch.setattr(exit_guard, "_last_acts", ())
    monkeypatch.setattr(cli, "_heard", 0)
    monkeypatch.setattr(cli, "_begun", False)
    cli.exit_begun()
    exit_cleanly(signal.SIGTERM, None)  # returns: the exit goes on
    exit_cleanly(signal.SIGTERM, None)
    logged = (len(_lines(caplog.text, UNSIGNALLED_EXIT_LOG)), len(_lines(caplog.text, SECOND_SIGNAL_LOG)))
    assert (stood.status, logged) == ([], (1, 1))
    exit_cleanly(signal.SIGTERM, None)
    assert stood.status == [FORCED_STATUS]

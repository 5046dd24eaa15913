"""The guard's last acts and its end at the interpreter's exit (``exit_guard``), with its sleep and its
``os._exit`` stood in for as in ``test_exit_guard_arm.py``: every last act runs, one that raises does
not keep the next from running, one that hangs does not hold the end past ``LAST_ACTS_S``, the log is
flushed before the acts and after them, and the exit's last wait once the guard has fired ends with
the forced status, not 0.

Found by mutation testing (mutants14, docs/experiments.md): each of these was removable with every
test of the guard passing."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import pytest

from service.api import exit_guard
from tests.service.api.guard_stand import Stand, stood_guard

BOUND_S = 30.0  # a bound for a thread on a loaded host, not a speed


@pytest.fixture
def stand(monkeypatch: pytest.MonkeyPatch) -> Stand:
    return stood_guard(monkeypatch)


def _ended_with(monkeypatch: pytest.MonkeyPatch, acts: list[Callable[[], None]]) -> None:
    monkeypatch.setattr(exit_guard, "_last_acts", tuple(acts))
    exit_guard._end_after(6.0)


def test_every_last_act_runs_though_one_raises(stand: Stand, monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str] = []

    def fails() -> None:
        ran.append("first")
        raise RuntimeError("the embedded server's end failed")

    _ended_with(monkeypatch, [fails, lambda: ran.append("second")])
    assert ran == ["first", "second"]
    assert stand.status == [exit_guard.FORCED_STATUS]
    assert exit_guard.FORCED_STATUS != 0  # 0 says the stop ended in order: a forced end did not


def test_a_last_act_that_hangs_does_not_hold_the_end(stand: Stand, monkeypatch: pytest.MonkeyPatch) -> None:
    never, finished = threading.Event(), threading.Event()

    def hangs() -> None:
        never.wait(BOUND_S)
        finished.set()

    try:
        _ended_with(monkeypatch, [hangs])
        assert not finished.is_set()  # ended LAST_ACTS_S on, not once the act was through
    finally:
        never.set()  # the act's daemon thread ends
    assert stand.status == [exit_guard.FORCED_STATUS]


def test_the_log_is_flushed_before_the_last_acts_and_after_them(
    stand: Stand, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    events: list[str] = []

    class _Recording(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            pass

        def flush(self) -> None:
            events.append("flush")

    recording = _Recording()
    logging.getLogger().addHandler(recording)
    try:
        with caplog.at_level(logging.WARNING, logger="service.shutdown"):
            _ended_with(monkeypatch, [lambda: events.append("act")])
    finally:
        logging.getLogger().removeHandler(recording)
    assert events == ["flush", "act", "flush"]
    [line] = [r for r in caplog.records if r.getMessage() == exit_guard.EXIT_LOG]
    assert line.__dict__["status"] == exit_guard.FORCED_STATUS  # the status said where it is read


def test_an_exit_after_the_guard_fired_waits_for_it_then_ends_forced(stand: Stand) -> None:
    exit_guard._end_after(6.0)  # fires (its own end stood in for)
    assert stand.status == [exit_guard.FORCED_STATUS]
    guard = threading.Thread(target=threading.Event().wait, args=(0.2,), daemon=True)  # its acts
    guard.start()
    exit_guard._armed = guard  # monkeypatched back by the fixture
    exit_guard._at_the_exits_end()
    assert not guard.is_alive()  # waited for the guard's acts
    assert (stand.status, stand.kept) == ([exit_guard.FORCED_STATUS] * 2, 0)


def test_an_exit_before_the_guard_fired_is_not_ended_by_it(stand: Stand) -> None:
    guard = threading.Thread(target=lambda: None, daemon=True)
    guard.start()
    exit_guard._armed = guard
    exit_guard._at_the_exits_end()
    assert (stand.status, stand.kept) == ([], 1)  # an ordinary exit keeps its own status


def test_enabling_again_keeps_the_last_calls_acts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exit_guard, "_enabled", False)
    monkeypatch.setattr(exit_guard, "_last_acts", ())
    exit_guard.enable([print])
    exit_guard.enable([print, print])
    assert exit_guard._last_acts == (print, print)


def _failed_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.exc_info is not None]


def _raises() -> None:
    raise RuntimeError("the embedded server's stop failed")


def test_a_failed_act_after_the_waits_is_told_as_that_not_as_a_forced_exits(
    stand: Stand, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(exit_guard, "_after_the_waits", [_raises])
    with caplog.at_level(logging.ERROR, logger="service.shutdown"):
        exit_guard._at_the_exits_end()  # an ordinary exit: the guard never fired
    assert _failed_lines(caplog) == [exit_guard.AFTER_THE_WAITS_FAILED]
    assert stand.status == []


def test_a_failed_last_act_is_told_as_the_forced_exits(
    stand: Stand, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="service.shutdown"):
        _ended_with(monkeypatch, [_raises])
    assert _failed_lines(caplog) == [exit_guard.LAST_ACT_FAILED]
    assert stand.status == [exit_guard.FORCED_STATUS]

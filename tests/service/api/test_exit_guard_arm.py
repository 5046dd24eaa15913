"""``exit_guard.arm`` and the guard's end, with its sleep and its ``os._exit`` stood in for (the guard
itself ends the process, so the end-to-end test, ``test_exit_guard.py``, sees only that it did): the
bound has a floor, the first stop's bound holds, the guard is a daemon, and what it logs names the
threads the exit would have waited for, flushed before the process ends with a stop's status, 0.

Found by mutation testing (mutants13, docs/experiments.md): each of these was removable with every
test passing."""

from __future__ import annotations

import logging
import threading
from types import SimpleNamespace

import pytest

from service.api import exit_guard
from tests.service.api.guard_stand import Stand, stood_guard


@pytest.fixture
def stand(monkeypatch: pytest.MonkeyPatch) -> Stand:
    return stood_guard(monkeypatch)


def _armed(bound_s: float) -> threading.Thread:
    guard = exit_guard.arm(bound_s)
    assert guard is not None
    guard.join(30.0)
    return guard


def test_a_bound_under_the_floor_is_raised_to_it(stand: Stand) -> None:
    _armed(1.0)
    assert stand.slept == [exit_guard.MIN_BOUND_S]


def test_a_bound_over_the_floor_is_kept_and_the_first_stops_bound_holds(stand: Stand) -> None:
    guard = _armed(7.0)
    assert exit_guard.arm(60.0) is guard
    assert stand.slept == [7.0]
    assert guard.daemon  # the guard itself holds no exit


def test_the_end_names_the_threads_the_exit_waits_for_flushes_and_exits_forced(
    stand: Stand, caplog: pytest.LogCaptureFixture
) -> None:
    release = threading.Event()
    waiting = threading.Thread(target=release.wait, name="planning", daemon=False)
    daemon = threading.Thread(target=release.wait, name="reaper", daemon=True)
    flushed: list[int] = []

    class _Counting(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            pass

        def flush(self) -> None:
            flushed.append(1)

    counting = _Counting()
    logging.getLogger().addHandler(counting)
    waiting.start()
    daemon.start()
    try:
        with caplog.at_level(logging.WARNING, logger="service.shutdown"):
            exit_guard._end_after(6.0)
    finally:
        release.set()
        logging.getLogger().removeHandler(counting)
        waiting.join(5.0)
        daemon.join(5.0)
    [line] = [r for r in caplog.records if r.getMessage() == exit_guard.EXIT_LOG]
    assert "planning" in line.__dict__["threads"]
    assert "reaper" not in line.__dict__["threads"]
    assert flushed
    assert stand.status == [exit_guard.FORCED_STATUS]  # 70 since stop50: a forced end is no ordinary stop


def test_a_guard_not_enabled_is_not_armed(monkeypatch: pytest.MonkeyPatch) -> None:
    """As ``test_exit_guard.py``'s own test, but a guard armed by mistake fails it: its sleep here
    never ends. There, it ends the test process 5 s on, the failure with it (mutants13: the run's
    status was 0 with that test failed; stop50's forced status makes it 70, the lost report the same)."""
    monkeypatch.setattr(exit_guard, "time", SimpleNamespace(sleep=lambda _: threading.Event().wait()))
    monkeypatch.setattr(exit_guard, "_armed", None)
    assert exit_guard.arm(0.0) is None


def _exit_ends_after(
    stand: Stand, elapsed_s: float, bound_s: float = exit_guard.MIN_BOUND_S
) -> threading.Thread:
    """Arm the guard (at ``bound_s``), let ``elapsed_s`` pass on its clock, then end the exit's last
    wait, while the guard's thread, its sleep over, is kept from its decision (its lock held): a
    loaded host's scheduler that wakes it late. The guard's thread, let go once the exit has decided."""
    with exit_guard._lock:
        guard = exit_guard.arm(bound_s)
        assert guard is not None
        stand.now += elapsed_s
        exit_guard._at_the_exits_end()
    guard.join(30.0)
    return guard


def test_an_exit_ending_past_its_bound_is_forced_though_its_guard_has_not_woken(
    stand: Stand, caplog: pytest.LogCaptureFixture
) -> None:
    """review52a: a stalled embedded server's stop, SIGKILLed ``STOP_S`` after its start, ended the
    exit tens of ms past the bound; a guard that woke later still left it 0 (70 at an idle host)."""
    with caplog.at_level(logging.WARNING, logger="service.shutdown"):
        _exit_ends_after(stand, exit_guard.MIN_BOUND_S * 1.01)
    assert [r.getMessage() for r in caplog.records].count(exit_guard.EXIT_LOG) == 1
    assert stand.status == [exit_guard.FORCED_STATUS]


def test_an_exit_ending_within_its_bound_ends_nothing_however_late_its_guard_wakes(
    stand: Stand, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="service.shutdown"):
        _exit_ends_after(stand, exit_guard.MIN_BOUND_S * 0.99)
    assert exit_guard.EXIT_LOG not in [r.getMessage() for r in caplog.records]
    assert stand.status == []


def test_an_exit_ending_past_a_bound_under_the_floor_but_within_the_floor_ends_nothing(
    stand: Stand, caplog: pytest.LogCaptureFixture
) -> None:
    """The floor holds for the exit's own clock as for the guard's sleep: a 1 s bound is the floor's
    5 s, so an exit whose last wait ends 2 s after the stop ended within its bound, and is 0."""
    with caplog.at_level(logging.WARNING, logger="service.shutdown"):
        _exit_ends_after(stand, 2.0, bound_s=1.0)
    assert exit_guard.EXIT_LOG not in [r.getMessage() for r in caplog.records]
    assert stand.status == []


def test_an_exit_ending_after_its_guard_fired_leaves_the_end_to_the_guard(
    stand: Stand, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard woke at its bound and ended the process (here its ``os._exit`` returns); an exit's
    last wait ending after that, past the bound, ends it too, but says nothing more and runs no last
    act again: the guard's WARNING is the forced exit's one line."""
    acts: list[int] = []
    monkeypatch.setattr(exit_guard, "_last_acts", (lambda: acts.append(1),))
    with caplog.at_level(logging.WARNING, logger="service.shutdown"):
        _armed(exit_guard.MIN_BOUND_S)
        stand.now += exit_guard.MIN_BOUND_S * 2
        exit_guard._at_the_exits_end()
    assert [r.getMessage() for r in caplog.records].count(exit_guard.EXIT_LOG) == 1
    assert acts == [1]
    assert stand.status == [exit_guard.FORCED_STATUS, exit_guard.FORCED_STATUS]

"""The background passes' one lifecycle (``service.periodic``): the reaper's and the actuals
follower's threads run on it, and their own tests hold their behaviour; these state its parts.
Ticks are gated on events: nothing here asserts a duration."""

from __future__ import annotations

import logging
import threading

import pytest

from service.periodic import Outage, Periodic

BOUND_S = 30.0  # how long a thread is given on a loaded host: a bound, not a speed
LOG = logging.getLogger("tests.periodic")


def _outage(warn_at: int = 1, ended: str | None = "through again") -> Outage:
    return Outage(LOG, "tick failed: %s", warn_at, ended)


def _ticks(*results: bool | Exception) -> Periodic:
    """A periodic thread (not started) whose ticks answer, or raise, ``results`` in turn."""
    answers = iter(results)

    def tick() -> bool:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    return Periodic("test-periodic", tick, 60.0, _outage(), rides_out=(ConnectionError,))


def _lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records]


def test_an_outage_is_said_once_when_it_starts_and_once_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    periodic = _ticks(ConnectionError("down"), ConnectionError("down"), True, True)
    with caplog.at_level(logging.INFO, logger=LOG.name):
        assert [periodic.run_once() for _ in range(4)] == [False, False, True, True]
    assert _lines(caplog) == [(logging.WARNING, "tick failed: down"), (logging.INFO, "through again")]


def test_a_tick_with_nothing_to_do_neither_counts_as_failed_nor_ends_the_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    periodic = _ticks(ConnectionError("down"), False, ConnectionError("down"), True)
    with caplog.at_level(logging.INFO, logger=LOG.name):
        for _ in range(4):
            periodic.run_once()
    assert _lines(caplog) == [(logging.WARNING, "tick failed: down"), (logging.INFO, "through again")]


def test_an_outage_shorter_than_its_warning_is_not_said(caplog: pytest.LogCaptureFixture) -> None:
    periodic = _ticks(ConnectionError("a"), True, ConnectionError("b"), ConnectionError("c"))
    periodic.outage = _outage(warn_at=2)
    with caplog.at_level(logging.INFO, logger=LOG.name):
        for _ in range(4):
            periodic.run_once()
    assert _lines(caplog) == [(logging.WARNING, "tick failed: c")]  # the second in a row, not the first's


def test_an_error_it_does_not_ride_out_is_raised() -> None:
    with pytest.raises(ValueError, match="a bug"):
        _ticks(ValueError("a bug")).run_once()


def test_the_thread_ticks_until_halted_and_stop_says_whether_the_tick_in_flight_ended() -> None:
    ticked, go_on = threading.Semaphore(0), threading.Event()

    def tick() -> bool:
        ticked.release()
        assert go_on.wait(BOUND_S)
        return True

    periodic = Periodic("test-periodic", tick, 0.0, _outage(), at_once=True).start()
    assert ticked.acquire(timeout=BOUND_S)
    assert periodic.start() is periodic  # no second thread while one runs
    (thread,) = [t for t in threading.enumerate() if t.name == "test-periodic"]
    assert periodic.stop(timeout_s=0.0) is False  # the tick in flight holds on: not ended
    go_on.set()
    thread.join(BOUND_S)
    assert not thread.is_alive()  # halted: no tick after the one in flight
    assert not ticked.acquire(blocking=False)
    assert periodic.stop() is True  # nothing left to wait for


def _counting(every_s: float, at_once: bool) -> tuple[Periodic, threading.Semaphore]:
    """A periodic thread (started) whose ticks each release the semaphore."""
    ticked = threading.Semaphore(0)

    def tick() -> bool:
        ticked.release()
        return True

    return Periodic("test-periodic", tick, every_s, _outage(), at_once=at_once).start(), ticked


def test_a_thread_that_ticks_at_once_ticks_at_start_then_waits_its_period() -> None:
    periodic, ticked = _counting(60.0, at_once=True)
    try:
        assert ticked.acquire(timeout=BOUND_S)  # the first tick at start, not a minute later
        assert not ticked.acquire(timeout=0.5)  # the next one a period later
    finally:
        assert periodic.stop()


def test_a_thread_not_at_once_waits_a_period_before_its_first_tick() -> None:
    periodic, ticked = _counting(60.0, at_once=False)
    try:
        assert not ticked.acquire(timeout=0.5)
    finally:
        assert periodic.stop()


def test_a_thread_started_again_after_a_stop_ticks_again() -> None:
    periodic, ticked = _counting(60.0, at_once=True)
    assert ticked.acquire(timeout=BOUND_S)
    assert periodic.stop()
    periodic.start()  # the stop's event cleared: the new thread's first tick at once
    try:
        assert ticked.acquire(timeout=BOUND_S)
    finally:
        assert periodic.stop()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_thread_an_unexpected_error_ended_is_started_again() -> None:
    ended, ticked = threading.Event(), threading.Semaphore(0)
    threads: list[threading.Thread] = []

    def tick() -> bool:
        threads.append(threading.current_thread())
        ticked.release()
        if not ended.is_set():
            ended.set()
            raise ValueError("a bug: ends the thread")
        return True

    periodic = Periodic("test-periodic", tick, 60.0, _outage(), rides_out=(ConnectionError,), at_once=True)
    periodic.start()
    assert ticked.acquire(timeout=BOUND_S)
    threads[0].join(BOUND_S)
    assert not threads[0].is_alive()
    periodic.start()  # the dead thread is not a running one
    try:
        assert ticked.acquire(timeout=BOUND_S)
    finally:
        assert periodic.stop()

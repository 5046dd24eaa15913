"""A published step's bookkeeping under way as the replica stops does not hold its planning thread:
the steps not begun go on a daemon the stop waits for, and a wait for the bookkeeping's thread ends
(``service/pipeline/post_publish.py``). Plain callables stand for the bookkeeping."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import pytest

from service.pipeline import post_publish
from service.pipeline.deadline import NO_DEADLINE, Deadline

WAIT_S = 30.0  # a bound against never: a blocked step waits this long at most


def _on(
    ran: list[tuple[str, threading.Thread]], name: str, then: Callable[[], object] = lambda: None
) -> Callable[[], None]:
    """A step that notes its name and thread, then calls ``then``."""

    def step() -> None:
        ran.append((name, threading.current_thread()))
        then()

    return step


def test_without_a_deadline_the_steps_not_begun_at_the_stop_go_on_a_daemon() -> None:
    """The stop comes during the first step: it ends on the planning thread, which then answers; the
    second step and the release follow, in order, on a daemon of the stop's (main: all in line)."""
    stopping, released = threading.Event(), threading.Event()
    ran: list[tuple[str, threading.Thread]] = []

    def serve() -> str:
        post_publish.later("entering the step's set", _on(ran, "set", stopping.set))
        post_publish.later("counting the step", _on(ran, "count"))
        return "answer"

    release = _on(ran, "release", released.set)
    assert post_publish.bounded(serve, release, NO_DEADLINE, stopping.is_set) == "answer"
    assert released.wait(WAIT_S)
    here = threading.current_thread()
    [(_, first), (_, second), (_, last)] = ran
    assert [name for name, _ in ran] == ["set", "count", "release"]
    assert (first, second is here, second.name, second.daemon, last) == (
        here,
        False,
        "after-publish-stopped",
        True,
        second,
    )


def test_with_a_deadline_the_request_stops_waiting_for_its_bookkeeping_at_the_stop() -> None:
    """Its bookkeeping's thread is held (a stalled Redis) and the caller's deadline is an hour away:
    the stop ends the request's wait there; the thread goes on, and the stop waits for it."""
    stopping, held = threading.Event(), threading.Event()
    ran: list[tuple[str, threading.Thread]] = []

    def serve() -> str:
        post_publish.later("entering the step's set", _on(ran, "set", lambda: held.wait(WAIT_S)))
        return "answer"

    answers: list[str] = []
    request = threading.Thread(
        target=lambda: answers.append(
            post_publish.bounded(serve, lambda: None, Deadline(time.perf_counter() + 3600.0), stopping.is_set)
        )
    )
    request.start()
    try:
        deadline = time.monotonic() + WAIT_S
        while not ran and time.monotonic() < deadline:
            time.sleep(0.01)
        stopping.set()
        request.join(WAIT_S)
        assert (request.is_alive(), answers) == (False, ["answer"])
        assert post_publish.settle(0.0, left_s=0.0) == 1  # still running: cut at the stop's bound
    finally:
        held.set()
        request.join(WAIT_S)


def test_the_request_stopped_waiting_says_the_replica_stops_not_the_callers_deadline(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The stop ends the wait an hour before the caller's deadline: its warning says so."""
    stopping, held = threading.Event(), threading.Event()
    stopping.set()

    def serve() -> str:
        post_publish.later("entering the step's set", lambda: held.wait(WAIT_S))
        return "answer"

    try:
        with caplog.at_level(logging.WARNING, logger="service.pipeline"):
            until = Deadline(time.perf_counter() + 3600.0)
            assert post_publish.bounded(serve, lambda: None, until, stopping.is_set) == "answer"
    finally:
        held.set()
        post_publish.settle(WAIT_S, left_s=WAIT_S)
    said = [record.getMessage() for record in caplog.records]
    assert said == ["the replica stops; the bookkeeping after its publish goes on"]


def test_a_request_whose_bookkeeping_ended_answers_then_though_its_deadline_is_far() -> None:
    """Watching for the stop, the request still answers as its bookkeeping's thread ends, not at its
    caller's deadline an hour away."""
    answers: list[str] = []

    def serve() -> str:
        post_publish.later("entering the step's set", lambda: None)
        return "answer"

    request = threading.Thread(
        target=lambda: answers.append(
            post_publish.bounded(serve, lambda: None, Deadline(time.perf_counter() + 3600.0), lambda: False)
        ),
        daemon=True,
    )
    request.start()
    request.join(WAIT_S)
    assert (request.is_alive(), answers) == (False, ["answer"])


def test_a_refused_requests_bookkeeping_not_begun_at_the_stop_goes_on_a_daemon() -> None:
    """A request that raised runs its bookkeeping in line before it answers, until the stop: the steps
    left then, and the release, go on the stop's daemon, as a published one's do."""
    stopping, released = threading.Event(), threading.Event()
    ran: list[tuple[str, threading.Thread]] = []

    def serve() -> str:
        post_publish.later("entering the step's set", _on(ran, "set", stopping.set))
        post_publish.later("counting the step", _on(ran, "count"))
        raise LookupError("refused after the publish queued its bookkeeping")

    with pytest.raises(LookupError):
        post_publish.bounded(serve, _on(ran, "release", released.set), NO_DEADLINE, stopping.is_set)
    assert released.wait(WAIT_S)
    [(_, first), (_, second), (_, last)] = ran
    assert [name for name, _ in ran] == ["set", "count", "release"]
    assert (first is threading.current_thread(), second.name, last) == (True, "after-publish-stopped", second)

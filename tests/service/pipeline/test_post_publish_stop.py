"""A published step's bookkeeping under way as the replica stops does not hold its planning thread:
the steps not begun go on a daemon the stop waits for, and a wait for the bookkeeping's thread ends
(``service/pipeline/post_publish.py``). Plain callables stand for the bookkeeping."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

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

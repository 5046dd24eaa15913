"""The bookkeeping after a publish runs in a context of its own: the schedule's id, none of the
request's deadlines (``post_publish.later``, ``service.logs.schedule_only_context``).

Each step ran in a copy of the request's context, which carries the stop's clock and ``NEVER``
(``service/api/stopping.py``), a caller's hard deadline (``scheduler.giveup``) and the predict
stage's cutoff (``predictors.cutoff``). No step checks one today; one that did would give up
bookkeeping that must run (the id entering its step's set, the retrain count) at the replica's stop,
when it is handed to a daemon precisely so that it still runs (stop49). Plain callables stand for the
bookkeeping; each states what its context would make a deadline-aware step do."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from predictors import cutoff
from scheduler import giveup
from scheduler.errors import DeadlinePassedError
from service.api import stopping
from service.logs import schedule_context, schedule_id_var
from service.pipeline import post_publish
from service.pipeline.deadline import NO_DEADLINE, Deadline

WAIT_S = 30.0  # a bound against never: the release comes within it


def _cut() -> None:
    raise DeadlinePassedError("predict", 0.0, 1.0)


def _seen(
    name: str, seen: list[tuple[str, str | None, str]], then: Callable[[], object]
) -> Callable[[], None]:
    """A step that notes its schedule id and whether a deadline-aware step would go on, then ``then``."""

    def step() -> None:
        try:
            giveup.check()
            cutoff.check()
            verdict = "ran"
        except DeadlinePassedError:
            verdict = "given up"
        seen.append((name, schedule_id_var.get(), verdict))
        then()

    return step


def test_the_steps_a_stop_hands_to_a_daemon_are_not_given_up_by_its_clock() -> None:
    """As the route runs it: the pipeline inside ``planner_stops``, whose clock jumps past ``NEVER``
    at the stop. The stop comes during the first step; the second runs on the stop's daemon, and both
    run under the step's id with no deadline passed (main: the second saw its copy's stopped clock)."""
    stop, released = threading.Event(), threading.Event()
    seen: list[tuple[str, str | None, str]] = []

    def serve() -> str:
        with schedule_context("step-7"):
            post_publish.later("entering the step's set", _seen("set", seen, stop.set))
            post_publish.later("counting the step", _seen("count", seen, lambda: None))
        return "answer"

    with stopping.planner_stops(stop):
        answer = post_publish.bounded(serve, released.set, NO_DEADLINE, stop.is_set)
    assert (answer, released.wait(WAIT_S)) == ("answer", True)
    assert seen == [("set", "step-7", "ran"), ("count", "step-7", "ran")]


def test_a_caller_deadline_passed_before_the_publish_does_not_give_its_bookkeeping_up() -> None:
    """On the bookkeeping's own thread (a caller's deadline an hour away), queued where a hard deadline
    had passed and the predict stage's cutoff raises: the step runs (main: given up)."""
    seen: list[tuple[str, str | None, str]] = []

    def serve() -> str:
        with schedule_context("step-8"), giveup.giving_up_at(0.0), cutoff.checking(_cut):
            post_publish.later("remembering worker profiles", _seen("profiles", seen, lambda: None))
        return "answer"

    until = Deadline(time.perf_counter() + 3_600.0)
    assert post_publish.bounded(serve, lambda: None, until) == "answer"
    assert seen == [("profiles", "step-8", "ran")]


def test_bookkeeping_a_step_queues_itself_runs() -> None:
    """A step that queues bookkeeping of its own (``later`` inside one) has it run at once: its context
    collects nothing. Main's copy carried the request's collector, whose steps were already read on
    the bookkeeping's thread: the queued one was dropped."""
    seen: list[tuple[str, str | None, str]] = []

    def nested() -> None:
        post_publish.later("counting the step", _seen("count", seen, lambda: None))

    def serve() -> str:
        with schedule_context("step-9"):
            post_publish.later("entering the step's set", nested)
        return "answer"

    until = Deadline(time.perf_counter() + 3_600.0)
    assert post_publish.bounded(serve, lambda: None, until) == "answer"
    assert seen == [("count", "step-9", "ran")]

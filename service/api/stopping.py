"""A plan still running when its replica stops gives up, and its take-back does not hold the exit.

Why. uvicorn waits 10 s for the requests in flight and then cancels their handlers, but a plan runs
on a planning thread that a cancel cannot stop (``service/api/plan_thread.py``): it went on to its
budget (up to 60 s), published, and took its in-flight mark back, each Redis call one command
timeout with its retries on a stalled Redis, and the process's exit waited for all of it (anyio's
worker threads are not daemons). A plan finished after its handler was cancelled is read by nobody.

How. The app's stop (``Startup.halt``) sets the app's ``stopping`` event. The planner already stops at
its caller's hard deadline, checked at the end of each of its stages and between the parts of its
long loops (``scheduler/giveup.py``), and reads that deadline on a clock the caller may name
(``giveup.reading``). ``planner_stops`` names one that jumps past every deadline once the event is
set, and gives a plan without a caller's deadline one no clock reaches otherwise (``NEVER``), so the
same checks end it: a plan without one that runs to its end is the same plan. Its give-up is logged
once (``GIVEN_UP_LOG``; the problem handler adds no line of its own) and raised as a 503 that nobody
reads (its handler was cancelled), wherever the check fired: inside the planner's own give-up, or
before it (the body's rules, for a retry). Its take-back (``released``) then runs on a daemon the
stop waits for one command timeout at most (``plan_thread.GIVEN_UP``), not on the planning thread: a
take-back is two Redis calls, each up to three timeouts on a stalled Redis.

The publish stage checks the stop once more just before the publish's call goes out (``stages``), so a stop
that came after the planner's last check publishes nothing either (a step that went out for nobody: under a
drawn id no retry finds it). Under ``serve`` the handlers still running are cut before the stop is set
(uvicorn cancels them at its graceful wait's end, then runs the app's stop), and a cut request is
answered at once that it published nothing unless its publish was already under way
(``cut_answer``): a plan that reached the publish check between the cut and the stop found no stop and
published all the same. So a request's plan gives up at the cut too (``Either``: the route sets its
own ``cut`` as its handler is cancelled, before that answer is sent; stop50).

What it does not reach: a publish under way when the stop comes, one Lua call
that Redis runs whole or not at all, whose reply says whether the step is out; it runs to its end, is
answered as published, and the bookkeeping after it goes on on a daemon (``post_publish``). A thread inside
a Redis call at the stop ends that call first; the process's exit is ended at its bound whatever still runs
(``service/api/exit_guard.py``): docs/operations.md, "Shutdown".
"""

from __future__ import annotations

import logging
import math
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

from scheduler import giveup
from scheduler.errors import DeadlinePassedError
from service.api.plan_thread import GIVEN_UP
from service.logs import mark_logged
from service.problems.table import DeadlineExceededError, UnavailableError

# The hard deadline of a plan whose caller set none: finite (``PlanRequest`` refuses others), and
# past every reading of ``time.perf_counter`` but the stopped clock's.
NEVER = sys.float_info.max
GIVEN_UP_LOG = "plan given up: the replica stopped while it was planned"
_log = logging.getLogger("service.pipeline")


class Stop(Protocol):
    """What the planner's give-up reads: set once the plan is read by nobody (``threading.Event``)."""

    def is_set(self) -> bool:
        """Whether the plan must give up."""
        ...


@dataclass(frozen=True)
class Either:
    """Set once any of ``events`` is: the replica's stop, or the request's own cut (its handler
    cancelled at the stop, before the stop is set)."""

    events: tuple[threading.Event, ...]

    def is_set(self) -> bool:
        """Whether any of the events is set."""
        return any(event.is_set() for event in self.events)


@contextmanager
def planner_stops(stopping: Stop) -> Iterator[None]:
    """Run a request's pipeline, its planner giving up at its next check once ``stopping`` is set;
    that give-up is raised as a 503 (``UnavailableError``) and logged once."""

    def wall() -> float:
        return math.inf if stopping.is_set() else time.perf_counter()

    try:
        with giveup.reading(wall), giveup.giving_up_at(NEVER):
            yield
    except (DeadlineExceededError, DeadlinePassedError) as error:
        gave_up = _given_up(error)
        if not (stopping.is_set() and gave_up is not None):
            raise
        _log.warning(GIVEN_UP_LOG, extra={"stage": gave_up.stage})
        stopped = UnavailableError("the replica is stopping: the plan was given up")
        mark_logged(stopped)  # the line above is its line: a handler still waiting logs no second one
        raise stopped from error


def _given_up(error: Exception) -> DeadlinePassedError | None:
    """The planner's give-up behind ``error``: raised as its 504 by ``Deadline.planner_gives_up``, or
    bare where a check fires outside it (the body's rules, read before the plan: ``check_plan_rules``
    runs ``validate_request``, which checks the hard deadline between its runs); None for a 504 of
    the caller's deadline's own checks (review48a)."""
    if isinstance(error, DeadlinePassedError):
        return error
    cause = error.__cause__
    return cause if isinstance(cause, DeadlinePassedError) else None


def released(release: Callable[[], None], stopping: Stop, bound_s: float) -> Callable[[], None]:
    """``release`` (the request's take-back), run in line, or once ``stopping`` is set on a daemon of
    ``plan_thread.GIVEN_UP`` that the stop waits for ``bound_s`` (the command timeout) at most: the
    planning thread then ends at once, and the process's exit does not wait for its retries."""

    def run() -> None:
        if stopping.is_set():
            GIVEN_UP.start(release, "plan-stopped", bound_s)
        else:
            release()

    return run

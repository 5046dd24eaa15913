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
(``GIVEN_UP_LOG``) and raised as a 503 that nobody reads (its handler was cancelled). Its take-back
(``released``) then runs on a daemon the stop waits for one command timeout at most
(``plan_thread.GIVEN_UP``), not on the planning thread: a take-back is two Redis calls, each up to
three timeouts on a stalled Redis.

What it does not reach: a stage that checks only at its end (CP-SAT's search, bounded by the plan's
budget), and a publish under way when the stop comes (it and the bookkeeping after it run to their
end): docs/operations.md, "Shutdown".
"""

from __future__ import annotations

import logging
import math
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from scheduler import giveup
from scheduler.errors import DeadlinePassedError
from service.api.plan_thread import GIVEN_UP
from service.problems.table import DeadlineExceededError, UnavailableError

# The hard deadline of a plan whose caller set none: finite (``PlanRequest`` refuses others), and
# past every reading of ``time.perf_counter`` but the stopped clock's.
NEVER = sys.float_info.max
GIVEN_UP_LOG = "plan given up: the replica stopped while it was planned"
_log = logging.getLogger("service.pipeline")


@contextmanager
def planner_stops(stopping: threading.Event) -> Iterator[None]:
    """Run a request's pipeline, its planner giving up at its next check once ``stopping`` is set;
    that give-up is raised as a 503 (``UnavailableError``) and logged once."""

    def wall() -> float:
        return math.inf if stopping.is_set() else time.perf_counter()

    try:
        with giveup.reading(wall), giveup.giving_up_at(NEVER):
            yield
    except DeadlineExceededError as error:  # ``Deadline.planner_gives_up`` raised it from the planner's
        if not (stopping.is_set() and isinstance(error.__cause__, DeadlinePassedError)):
            raise
        _log.warning(GIVEN_UP_LOG, extra={"stage": error.__cause__.stage})
        raise UnavailableError("the replica is stopping: the plan was given up") from error


def released(release: Callable[[], None], stopping: threading.Event, bound_s: float) -> Callable[[], None]:
    """``release`` (the request's take-back), run in line, or once ``stopping`` is set on a daemon of
    ``plan_thread.GIVEN_UP`` that the stop waits for ``bound_s`` (the command timeout) at most: the
    planning thread then ends at once, and the process's exit does not wait for its retries."""

    def run() -> None:
        if stopping.is_set():
            GIVEN_UP.start(release, "plan-stopped", bound_s)
        else:
            release()

    return run

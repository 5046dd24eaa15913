"""A plan still running as its replica stops gives up at the planner's next check, and its take-back
leaves the planning thread (``service/api/stopping.py``); ``test_shutdown_plan.py`` runs it end to end."""

from __future__ import annotations

import threading
import time

import pytest

from scheduler import giveup
from service.api.plan_thread import GIVEN_UP
from service.api.stopping import planner_stops, released
from service.pipeline.deadline import NO_DEADLINE, Deadline
from service.problems.table import DeadlineExceededError, UnavailableError


def _planned(until: Deadline) -> str:
    """A stage of the planner run as the pipeline runs it, under the caller's deadline ``until``."""
    with until.planner_gives_up(0.0) as give_up_at, giveup.giving_up_at(give_up_at), giveup.stage("search"):
        return "planned"


@pytest.mark.parametrize(
    "until", [NO_DEADLINE, Deadline(time.perf_counter() + 3600.0)], ids=["none", "an hour"]
)
def test_a_plan_runs_as_before_until_the_stop_then_gives_up_at_its_next_check(until: Deadline) -> None:
    """With or without a caller's deadline: planned while the replica runs; once it stops, the stage's
    check gives up, a 503 (not the caller's 504: its deadline has not passed)."""
    stopping = threading.Event()
    with planner_stops(stopping):
        assert _planned(until) == "planned"
    stopping.set()
    with pytest.raises(UnavailableError, match="replica is stopping"), planner_stops(stopping):
        _planned(until)


def test_a_callers_deadline_passed_is_its_504_whether_or_not_the_replica_stops() -> None:
    """The give-up at the caller's own deadline stays what it was while the replica runs."""
    with pytest.raises(DeadlineExceededError), planner_stops(threading.Event()):
        _planned(Deadline(time.perf_counter() - 1.0))


def test_the_take_back_runs_in_line_until_the_stop_then_on_a_daemon_the_stop_waits_for() -> None:
    """Before the stop, on the planning thread; after it, on a ``GIVEN_UP`` daemon, so the planning
    thread is free and a stalled take-back is cut at the stop's bound (here 0), not waited through."""
    stopping, ran, held = threading.Event(), [], threading.Event()

    def release() -> None:
        ran.append(threading.current_thread())
        held.wait(10.0)

    held.set()
    released(release, stopping, 0.0)()
    assert ran == [threading.current_thread()]
    held.clear()
    stopping.set()
    released(release, stopping, 0.0)()
    try:
        deadline = time.monotonic() + 10.0
        while len(ran) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert (ran[1].name, ran[1].daemon, GIVEN_UP.settle(0.0, left_s=0.0)) == ("plan-stopped", True, 1)
    finally:
        held.set()
        ran[-1].join(10.0)


def test_a_callers_own_504_raised_after_the_stop_stays_its_504() -> None:
    """A check of the caller's deadline itself (the predict stage's, the publish's reserve: no
    planner's give-up behind it) that fires once the replica has stopped is still the caller's 504,
    not the stop's 503: there is no planner's stage to name (review48a)."""
    stopping = threading.Event()
    stopping.set()
    with pytest.raises(DeadlineExceededError, match="passed before"), planner_stops(stopping):
        Deadline(time.perf_counter() - 1.0).check("it was planned (while it was predicted)")

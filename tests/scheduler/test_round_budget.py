"""A cpsat band round that cannot finish in its budget is cut short and gives its time back."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest

import scheduler.policies.bandround as bandround_module
from scheduler.at_once import all_at_once_finish
from scheduler.benchgen import bench_request, heavy_tailed_batch, mixed_inventory
from scheduler.finish import worker_finish
from scheduler.planner import plan
from scheduler.policies import ordering
from scheduler.policies import problem as problem_module
from scheduler.policies.base import BudgetSpent
from scheduler.policies.lpt_assign import lpt_assignment
from scheduler.policies.ordering import CANDIDATES, longest_first, order_queues
from scheduler.policies.problem import Problem, build_problem
from scheduler.types import PlanRequest
from tests.scheduler.fake_clock import SteppingClock

REQUEST = dataclasses.replace(bench_request(1_024, 16, seed=0), time_budget_s=3.0)


def test_a_placement_past_its_deadline_stops_with_budget_spent() -> None:
    problem = build_problem(REQUEST)
    tiers, band = [0] * len(problem.costs), lambda unit: 0
    with pytest.raises(BudgetSpent):
        lpt_assignment(problem, tiers, band, deadline=time.perf_counter() - 1.0)
    assert lpt_assignment(problem, tiers, band, deadline=time.perf_counter() + 60.0) == lpt_assignment(
        problem, tiers, band
    )


def test_ordering_past_its_deadline_stops_only_where_a_queue_must_be_played() -> None:
    problem = build_problem(REQUEST)
    assignment = lpt_assignment(problem)
    late = time.perf_counter() - 1.0
    everyone = [list(range(len(problem.steps)))] + [[] for _ in problem.costs[1:]]  # one crowded queue
    with pytest.raises(BudgetSpent):
        order_queues(problem, everyone, True, deadline=late)
    # every queue of the lpt plan runs at once here: nothing to play, so nothing to stop
    assert order_queues(problem, assignment, True, deadline=late) == order_queues(problem, assignment, True)


def test_a_crowded_queue_stops_before_a_candidate_play_that_would_end_past_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    problem = build_problem(REQUEST)
    everyone = [list(range(len(problem.steps)))] + [[] for _ in problem.costs[1:]]
    unhurried = order_queues(problem, everyone, True)
    monkeypatch.setattr(ordering, "clock", SteppingClock())
    # the queue is reached in time (second 1) and its first play ends at second 3, a second long;
    # a second play would end at second 5, past the deadline of second 4.5
    with pytest.raises(BudgetSpent):
        order_queues(problem, everyone, True, deadline=4.5)
    monkeypatch.setattr(ordering, "clock", SteppingClock())
    assert order_queues(problem, everyone, True, deadline=100.0) == unhurried


def test_a_round_cut_short_leaves_the_best_plan_so_far(monkeypatch: pytest.MonkeyPatch) -> None:
    def spent(*args: object, **kwargs: object) -> list[list[int]]:
        if kwargs.get("deadline") is not None:
            raise BudgetSpent
        return lpt_assignment(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(bandround_module, "lpt_assignment", spent)
    cut, lpt = plan(REQUEST, "cpsat"), plan(REQUEST, "lpt")
    assert cut.status == "FALLBACK_LPT"
    assert cut.predicted_makespan_s <= lpt.predicted_makespan_s
    assert sorted(k for w in cut.workers for k in w.items) == sorted(t.key for t in REQUEST.trajectories)


def test_a_round_whose_placement_ends_past_its_stop_is_not_ordered(monkeypatch: pytest.MonkeyPatch) -> None:
    ordered_rounds: list[int] = []

    def slow(*args: object, **kwargs: object) -> list[list[int]]:
        placed = lpt_assignment(*args, **kwargs)  # type: ignore[arg-type]
        if kwargs.get("deadline") is not None:
            time.sleep(max(0.0, float(kwargs["deadline"]) - time.perf_counter()) + 0.005)  # type: ignore[arg-type]
        return placed

    def counted(*args: object, **kwargs: object) -> object:
        if kwargs.get("deadline") is not None:
            ordered_rounds.append(1)
        return order_queues(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(bandround_module, "lpt_assignment", slow)
    monkeypatch.setattr(bandround_module, "order_queues", counted)
    late = plan(dataclasses.replace(REQUEST, time_budget_s=0.5), "cpsat")
    assert ordered_rounds == []
    assert late.status == "FALLBACK_LPT"
    assert late.predicted_makespan_s <= plan(REQUEST, "lpt").predicted_makespan_s


class _PlayClock:
    """A clock that moves only when a queue is played: a millisecond per item played."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.plays: list[int] = []  # the size of each queue played, in turn

    def now(self) -> float:
        return self.seconds

    def played(self, *args: Any, **kwargs: Any) -> float:
        self.seconds += 1e-3 * len(args[2])  # worker_finish(cost, prompts, steps, ...)
        self.plays.append(len(args[2]))
        return worker_finish(*args, **kwargs)


def _crowded() -> tuple[Problem, list[list[int]], list[int]]:
    """A long-tailed batch on four workers, lpt-placed: the sizes of the queues that run in waves."""
    request = PlanRequest(
        trajectories=heavy_tailed_batch(1_024, 2, median_output=12_000.0), inventory=mixed_inventory(4)
    )
    problem = build_problem(request)
    assignment = lpt_assignment(problem)
    waves = []
    for w, units in enumerate(assignment):
        queue = longest_first(problem, list(units), problem.costs[w])  # one trajectory a unit: u is item u
        if all_at_once_finish(problem.costs[w], *problem.lengths(queue), False) is None:
            waves.append(len(queue))
    return problem, assignment, waves


def test_a_search_leaves_time_for_one_play_of_every_queue_still_to_be_ordered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Time to search the first two queues and play the rest once, less half a play of the second:
    searching the second would leave the later queues to be played past ``search_until`` (the long
    chain-of-thought headline's lpt ordering ended 5-10 ms past an 80 ms budget that way). The
    first queue, whose pace is not yet known, is searched, the second played once, and the
    ordering ends in time (a later queue may be searched in the time that saved)."""
    problem, assignment, waves = _crowded()
    assert len(waves) >= 3  # a search of the second queue would crowd out the plays after it
    assert waves[1] not in (waves[0], *waves[2:])  # its plays are told apart by their size
    play = _PlayClock()
    monkeypatch.setattr(ordering, "clock", play)
    monkeypatch.setattr(problem_module, "worker_finish", play.played)
    searches = len(CANDIDATES[False])  # plays of a searched queue (each a millisecond per item here)
    until = 1e-3 * (searches * (waves[0] + waves[1]) + sum(waves[2:]) - waves[1] / 2)
    queues, finishes = order_queues(problem, assignment, False, search_until=until)
    assert play.seconds <= until
    assert play.plays[:searches] == [waves[0]] * searches
    assert play.plays.count(waves[1]) == 1
    for w, queue in enumerate(queues):
        assert finishes[w] == worker_finish(problem.costs[w], *problem.lengths(queue), False)


def test_a_search_with_time_for_every_candidate_is_the_unhurried_one(monkeypatch: pytest.MonkeyPatch) -> None:
    problem, assignment, waves = _crowded()
    unhurried = order_queues(
        dataclasses.replace(problem), assignment, False
    )  # its own plays (Problem.played)
    play = _PlayClock()
    monkeypatch.setattr(ordering, "clock", play)
    monkeypatch.setattr(problem_module, "worker_finish", play.played)
    until = 1e-3 * (len(CANDIDATES[False]) * sum(waves) + 1)  # every candidate of every queue, and a ms
    assert order_queues(problem, assignment, False, search_until=until) == unhurried


def test_ordering_stops_before_a_first_play_that_would_end_past_its_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Time for the first queue's plays and half the second's first play: the second is not played.
    Under KV admission a band plan's lowest-band queues took 20-40 ms a play at 4,096 x 32, and a
    first play started just before the deadline ended a cpsat round 17-31 ms past the search's end."""
    problem, assignment, waves = _crowded()
    assert waves[1] not in (waves[0], *waves[2:])  # its plays are told apart by their size
    unhurried = _PlayClock()
    monkeypatch.setattr(ordering, "clock", unhurried)
    monkeypatch.setattr(problem_module, "worker_finish", unhurried.played)
    order_queues(dataclasses.replace(problem), assignment, False, deadline=float("inf"))  # its own plays
    first_queue = unhurried.plays[: unhurried.plays.index(waves[1])]  # the first queue's plays
    play = _PlayClock()
    monkeypatch.setattr(ordering, "clock", play)
    monkeypatch.setattr(problem_module, "worker_finish", play.played)
    deadline = 1e-3 * (sum(first_queue) + waves[1] / 2)
    with pytest.raises(BudgetSpent):
        order_queues(problem, assignment, False, deadline=deadline)
    assert play.plays == first_queue
    assert play.seconds <= deadline

"""A cpsat band round that cannot finish in its budget is cut short and gives its time back."""

from __future__ import annotations

import dataclasses
import time

import pytest

import scheduler.policies.cpsat as cpsat_module
from scheduler.benchgen import bench_request
from scheduler.planner import plan
from scheduler.policies import ordering
from scheduler.policies.base import BudgetSpent
from scheduler.policies.lpt import lpt_assignment
from scheduler.policies.ordering import order_queues
from scheduler.policies.problem import build_problem
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

    monkeypatch.setattr(cpsat_module, "lpt_assignment", spent)
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

    monkeypatch.setattr(cpsat_module, "lpt_assignment", slow)
    monkeypatch.setattr(cpsat_module, "order_queues", counted)
    late = plan(dataclasses.replace(REQUEST, time_budget_s=0.5), "cpsat")
    assert ordered_rounds == []
    assert late.status == "FALLBACK_LPT"
    assert late.predicted_makespan_s <= plan(REQUEST, "lpt").predicted_makespan_s

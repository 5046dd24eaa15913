"""A plan plays each queue once: ``Problem.played`` answers a queue played again from its memo."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.benchgen import heavy_tailed_batch, mixed_inventory
from scheduler.finish import worker_finish
from scheduler.policies import problem as problem_module
from scheduler.policies.lpt_assign import lpt_assignment
from scheduler.policies.ordering import order_queues
from scheduler.policies.problem import Problem, build_problem
from scheduler.types import PlanRequest


def _crowded(reserve: bool) -> tuple[Problem, list[list[int]], int]:
    """A long-tailed batch on four workers, lpt-placed, and a worker whose queue runs in waves."""
    request = PlanRequest(
        trajectories=heavy_tailed_batch(512, 3, median_output=12_000.0),
        inventory=mixed_inventory(4),
        kv_admission=reserve,
    )
    problem = build_problem(request)
    assignment = lpt_assignment(problem)
    return problem, assignment, max(range(4), key=lambda w: len(assignment[w]))


class _Counted:
    """``worker_finish``, counting its plays."""

    def __init__(self) -> None:
        self.plays = 0

    def __call__(self, *args: Any, **kwargs: Any) -> float:
        self.plays += 1
        return worker_finish(*args, **kwargs)


@pytest.mark.parametrize("reserve", [False, True])
def test_ordering_the_same_queues_again_in_one_plan_plays_nothing_and_gives_the_same_orders(
    reserve: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # cpsat's second round orders again the queues its re-placement left as they were
    problem, assignment, _ = _crowded(reserve)
    counted = _Counted()
    monkeypatch.setattr(problem_module, "worker_finish", counted)
    first = order_queues(problem, assignment, reserve)
    assert counted.plays > 0  # some queue runs in waves: its candidates were played
    before = counted.plays
    assert order_queues(problem, assignment, reserve) == first
    assert counted.plays == before
    assert order_queues(dataclasses.replace(problem), assignment, reserve) == first  # a fresh memo
    assert counted.plays == 2 * before


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.0, 1.5), min_size=1, max_size=5), st.booleans())
def test_a_played_queue_reads_as_its_play_to_each_bound(shares: list[float], reserve: bool) -> None:
    # the contract every caller compares on, whatever was kept: the finish where the play ends
    # before the bound, at least the bound where it does not
    problem, assignment, w = _crowded(reserve)
    queue, cost = assignment[w], problem.costs[w]
    finish = worker_finish(cost, *problem.lengths(queue), reserve)
    for share in shares:
        bound = share * finish if share <= 1.0 else math.inf
        value = problem.played(cost, queue, reserve, stop_at=bound)
        if finish < bound:
            assert value == finish
        else:
            assert bound <= value <= finish


def test_a_stopped_play_answers_bounds_up_to_where_it_stopped_and_plays_again_past_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    problem, assignment, w = _crowded(True)
    queue, cost = assignment[w], problem.costs[w]
    counted = _Counted()
    monkeypatch.setattr(problem_module, "worker_finish", counted)
    finish = problem.played(cost, queue, True)
    stopped = problem.played(cost, queue, True, stop_at=finish / 2)
    assert counted.plays == 1
    assert stopped == finish
    fresh = dataclasses.replace(problem)
    stopped = fresh.played(cost, queue, True, stop_at=finish / 2)
    assert finish / 2 <= stopped < finish
    assert counted.plays == 2
    assert fresh.played(cost, queue, True, stop_at=stopped) == stopped
    assert counted.plays == 2
    assert fresh.played(cost, queue, True) == finish
    assert counted.plays == 3
    assert fresh.played(cost, queue, True, stop_at=finish / 4) == finish
    assert counted.plays == 3

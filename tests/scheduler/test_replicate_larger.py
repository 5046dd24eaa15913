"""Where time is clearly left, cpsat copies a sub-plan twice as large first, then the usual one,
and keeps the better whole plan (``cpsat._copied``; ``copybudget.LARGER_FIRST``, ``SMALLER_AFTER``).

The planning clock is a ``ManualClock`` on which every lpt start (the whole batch's and each
sub-plan's) takes a second and nothing else any time (``fake_clock.slow_lpt_phase``): what is left
reads in lpt phases. 1,024 x 32 bench batches with sub-pools of 8 workers: K = 4, and K = 2 for
the sub-plan twice as large.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import scheduler.policies.cpsat as cpsat_module
from scheduler.benchgen import bench_request
from scheduler.planner import REPORT_SHARE, plan, prepare
from scheduler.policies import copybudget, replicate
from scheduler.policies.problem import build_problem
from scheduler.types import PlanRequest
from tests.scheduler.fake_clock import ManualClock, slow_lpt_phase


@pytest.fixture(autouse=True)
def small_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Decompose test-sized batches: 256 units and 8 workers per sub-pool are enough here."""
    monkeypatch.setattr(replicate, "MIN_UNITS", 256)
    monkeypatch.setattr(replicate, "SUB_WORKERS", 8)


def _request(left: float) -> PlanRequest:
    """A bench batch whose budget leaves cpsat's search ``left`` lpt phases after its lpt start."""
    budget = (left + 1.0) / (1.0 - REPORT_SHARE)
    return dataclasses.replace(bench_request(1_024, 32, seed=3), time_budget_s=budget)


def _dealt(
    monkeypatch: pytest.MonkeyPatch, request: PlanRequest, fake: ManualClock, costs: dict[int, float]
) -> list[tuple[int, float]]:
    """``replicate.spread_out`` recording each call's K and the makespan of the copies it dealt
    (played on ``request``'s own lengths), and taking ``costs[K]`` seconds of the clock; calls
    for a sub-plan's own copies (a sub-plan is cpsat's plan of its sub-batch) are not recorded."""
    calls: list[tuple[int, float]] = []
    deal = replicate.spread_out
    whole = build_problem(request)

    def dealt(part: replicate.Split, queues: Any, prompts: Any, workers: int) -> Any:
        out = deal(part, queues, prompts, workers)
        if workers != len(whole.costs):
            return out
        calls.append((part.copies, max(whole.finishes(out, request.kv_admission))))
        fake.seconds += costs.get(part.copies, 0.0)
        return out

    monkeypatch.setattr(replicate, "spread_out", dealt)
    return calls


def test_a_split_into_fewer_copies_has_twice_the_sub_pool_and_sub_batch() -> None:
    request = _request(left=6.0)
    problem = build_problem(request)
    part, larger = replicate.split(problem, request), replicate.split(problem, request, fewer=2)
    assert part is not None
    assert larger is not None
    assert (part.copies, larger.copies) == (4, 2)
    assert len(larger.pools[0]) == 2 * len(part.pools[0]) == 16
    assert larger.request.trajectories == tuple(request.trajectories[u] for u in larger.ranked[::2])
    assert replicate.split(problem, request, fewer=4) is None  # one copy is no decomposition


def test_with_time_clearly_left_the_larger_sub_plan_is_copied_first_and_the_better_plan_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """6 lpt phases left (``LARGER_FIRST`` is 4): the K = 2 sub-plan's copies, then the K = 4
    ones (``SMALLER_AFTER`` left after), and the plan is no later than the better of the two."""
    request = _request(left=6.0)
    fake = slow_lpt_phase(monkeypatch, cpsat_module)
    dealt = _dealt(monkeypatch, request, fake, {})
    planned = plan(request, "cpsat", prepared=prepare(request))
    assert [k for k, _ in dealt] == [2, 4]
    assert planned.status in {"OPTIMAL", "FEASIBLE"}
    assert planned.predicted_makespan_s <= min(makespan for _, makespan in dealt) + 1e-9
    keys = sorted(key for wp in planned.workers for key in wp.items)
    assert keys == sorted(t.key for t in request.trajectories)


@pytest.mark.parametrize(
    ("left", "costs", "expected"),
    [
        (copybudget.LARGER_FIRST - 0.5, {}, [4]),  # not clearly left: the usual copies alone, as before
        (6.0, {2: 4.0}, [2]),  # the larger copies left under SMALLER_AFTER: no second copies
    ],
)
def test_the_larger_sub_plan_goes_first_and_the_usual_one_follows_only_where_time_allows(
    monkeypatch: pytest.MonkeyPatch, left: float, costs: dict[int, float], expected: list[int]
) -> None:
    request = _request(left=left)
    fake = slow_lpt_phase(monkeypatch, cpsat_module)
    dealt = _dealt(monkeypatch, request, fake, costs)
    plan(request, "cpsat", prepared=prepare(request))
    assert [k for k, _ in dealt] == expected

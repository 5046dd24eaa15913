"""least loaded's dealing where no item is pinned (``least_loaded._deal_anywhere``) deals exactly the
queues the two-level lanes (``_Lanes``) deal: it exists only to be cheaper (6-10 ms of the length-blind
plans at 4,096 x 32 under the service's 80 ms default, docs/experiments.md, budget50).
"""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings

from scheduler.benchgen import bench_request
from scheduler.policies.least_loaded import deal_items, worker_lanes
from scheduler.policies.problem import Problem, build_problem, longest_first
from scheduler.types import PlanRequest
from tests.scheduler.plan_strategies import plan_requests


def _both_ways(problem: Problem, order: list[int]) -> tuple[list[list[int]], list[list[int]]]:
    """The queues dealt where the problem says no unit is restricted, and by the lanes kept per worker."""
    lanes = worker_lanes(problem)
    general = dataclasses.replace(problem, unrestricted=False)  # every unit still allows every worker
    return deal_items(problem, lanes, order), deal_items(general, lanes, order)


def test_the_bench_batches_are_dealt_as_the_lanes_kept_per_worker_deal_them() -> None:
    for trajectories, workers in ((1_024, 16), (4_096, 32), (2_048, 4)):  # the last: lanes taken again
        problem = build_problem(bench_request(trajectories, workers, seed=3))
        assert problem.unrestricted
        for order in (list(range(len(problem.units))), list(longest_first(problem.units))):
            fast, general = _both_ways(problem, order)
            assert fast == general


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan_requests(max_groups=12, max_workers=5, max_samples=8, affinity=False))
def test_any_unpinned_batch_is_dealt_as_the_lanes_kept_per_worker_deal_it(request: PlanRequest) -> None:
    problem = build_problem(request)
    if not problem.unrestricted:
        return  # pins or caches restrict some item: the lanes kept per worker deal it, as before
    for order in (list(range(len(problem.units))), list(longest_first(problem.units))):
        fast, general = _both_ways(problem, order)
        assert fast == general


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan_requests(max_groups=8, max_workers=4, max_samples=6, affinity=True))
def test_any_unpinned_batch_of_groups_is_dealt_whole_as_the_lanes_kept_per_worker_deal_it(
    request: PlanRequest,
) -> None:
    """The waves' dealing takes units of several members (mutants14: one member each was dealt)."""
    problem = build_problem(request)
    if not problem.unrestricted:
        return
    order = list(longest_first(problem.units))
    fast, general = _both_ways(problem, order)
    assert fast == general
    assert sorted(m for queue in fast for m in queue) == sorted(m for u in problem.units for m in u.members)

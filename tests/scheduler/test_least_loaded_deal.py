"""least loaded's dealing where no item is pinned (``least_loaded._deal_anywhere``) deals exactly the
queues the two-level lanes (``_Lanes``) deal: it exists only to be cheaper (6-10 ms of the length-blind
plans at 4,096 x 32 under the service's 80 ms default, docs/experiments.md, budget50). And how a batch
that runs at once is dealt and played on a mixed pool: in turn, whatever each worker's speed.
"""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings

from scheduler.benchgen import bench_request
from scheduler.devices import device_profile, model_preset
from scheduler.policies.base import Placement, Policy
from scheduler.policies.least_loaded import LeastLoadedPolicy, deal_items, worker_lanes
from scheduler.policies.problem import Problem, build_problem, longest_first
from scheduler.policies.round_robin import RoundRobinPolicy
from scheduler.simulator import SimOptions, SimResult, simulate
from scheduler.types import Inventory, Plan, PlanRequest, Trajectory, Worker, WorkerPlan
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


def test_a_batch_that_runs_at_once_is_dealt_in_turn_whatever_each_workers_speed() -> None:
    """Why least_loaded reads 23.5 s on math100's step 1 on 2 H100 + 2 Ascend 910B against round robin's
    16.7 s (docs/replay.md, "A batch that runs at once"): every worker has free slots at time 0, so the
    shared queue deals one item each in turn, as concurrently polling sidecars do, and never queues. With
    as many samples a prompt as workers, sample k of every prompt lands on worker k, so one long prompt
    reaches both slow workers, while round robin keeps it whole on the first (fast) worker. Physics of a
    length-blind deal, not a defect: the plan's static queues are the simulator's play, and the slow
    workers take exactly as many items as the fast ones."""
    workers = (*(Worker(f"h{i}", device_profile("H100")) for i in range(2)),
               *(Worker(f"a{i}", device_profile("Ascend910B")) for i in range(2)))  # fmt: skip
    inventory = Inventory(workers, model_preset("7b"))
    lengths = {"long": (600, 300, 700, 800), **{f"p{i}": (100, 120, 90, 110) for i in range(3)}}
    batch = tuple(Trajectory(p, k, 100, 1_000, n) for p, ns in lengths.items() for k, n in enumerate(ns))
    truth = {t.key: int(t.predicted_tokens) for t in batch}
    played: dict[str, SimResult] = {}
    policies: tuple[Policy, ...] = (LeastLoadedPolicy(), RoundRobinPolicy())
    for policy in policies:
        the_plan = _as_plan(policy.plan(PlanRequest(batch, inventory)), batch, inventory)
        played[policy.name] = simulate(the_plan, batch, truth, inventory, SimOptions())
        on = {r.key: r.worker_id for r in played[policy.name].items}
        assert all(r.start_s == 0.0 for r in played[policy.name].items)  # nothing queues
        assert on == {k: w.worker_id for w in the_plan.workers for k in w.items}  # the forecast is the play
    ll, rr = played["least_loaded"], played["round_robin"]
    assert {r.key: r.worker_id for r in ll.items} == {t.key: workers[t.sample_idx].worker_id for t in batch}
    assert {r.worker_id for r in rr.items if r.key.startswith("long#")} == {"h0"}
    assert ll.makespan_s == ll.worker_finish_s["a1"] > 1.5 * rr.makespan_s  # long#3 on a slow worker


def _as_plan(placement: Placement, batch: tuple[Trajectory, ...], inventory: Inventory) -> Plan:
    """A policy's placement as the plan the simulator plays (the planner's dressing, off the clock)."""
    queues = tuple(
        WorkerPlan(w.worker_id, tuple(batch[i].key for i in q), 0.0)
        for w, q in zip(inventory.workers, placement.queues, strict=True)
    )
    order = tuple(batch[i].key for i in placement.dispatch_order)
    return Plan("test", queues, 0.0, 0.0, placement.status, 0.0, dispatch_order=order)

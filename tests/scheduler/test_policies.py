"""Every policy returns a complete, feasible plan whose predictions the simulator reproduces."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings

from scheduler import clock
from scheduler.benchgen import bench_request
from scheduler.costmodel import worker_cost
from scheduler.devices import device_profile, model_preset
from scheduler.planner import plan
from scheduler.policies import POLICY_NAMES
from scheduler.simulator import SimOptions, simulate
from scheduler.stepsum import planned_steps
from scheduler.types import Inventory, Plan, PlanRequest, Trajectory, Worker
from tests.scheduler.plan_strategies import plan_requests

PROPERTIES = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _worker_of(result: Plan) -> dict[str, str]:
    return {key: wp.worker_id for wp in result.workers for key in wp.items}


@PROPERTIES
@given(plan_requests())
def test_every_trajectory_is_planned_exactly_once_on_an_allowed_worker(request: PlanRequest) -> None:
    workers = {w.worker_id: w for w in request.inventory.workers}
    for name in POLICY_NAMES:
        result = plan(request, name)
        assert [wp.worker_id for wp in result.workers] == list(workers)
        keys = [key for wp in result.workers for key in wp.items]
        assert sorted(keys) == sorted(t.key for t in request.trajectories), name
        where = _worker_of(result)
        for t in request.trajectories:
            worker = workers[where[t.key]]
            assert where[t.key] not in request.excluded_workers, name
            assert (
                t.prompt_tokens + t.max_new_tokens
                <= worker_cost(worker, request.inventory.model).kv_capacity_tokens
            )
            if t.pinned_worker is not None:
                assert where[t.key] == t.pinned_worker, name
        if request.prefix_affinity:
            groups: dict[str, set[str]] = {}
            for t in request.trajectories:
                groups.setdefault(t.group, set()).add(where[t.key])
            assert all(len(ws) == 1 for ws in groups.values()), name


@PROPERTIES
@given(plan_requests())
def test_the_predicted_makespan_never_undercuts_the_lower_bound(request: PlanRequest) -> None:
    for name in POLICY_NAMES:
        result = plan(request, name)
        assert result.predicted_makespan_s >= result.lower_bound_s * (1 - 1e-9), name
        assert result.predicted_makespan_s == max(wp.predicted_finish_s for wp in result.workers)


@PROPERTIES
@given(plan_requests())
def test_cpsat_is_never_worse_than_lpt(request: PlanRequest) -> None:
    assert plan(request, "cpsat").predicted_makespan_s <= plan(request, "lpt").predicted_makespan_s * (
        1 + 1e-12
    )


@PROPERTIES
@given(plan_requests())
def test_plans_are_deterministic_for_a_fixed_seed(request: PlanRequest) -> None:
    # On the frozen clock (scheduler/clock.py): on the wall clock a plan is what its budget allowed on
    # the host at the time, by design, and a fresh-clone CI at load ~15 drew two cpsat plans of one
    # request that differed (a solve cut by its wall-clock limit); a set's order or an unseeded draw
    # would still differ here
    for name in POLICY_NAMES:
        with clock.frozen():
            first, second = plan(request, name), plan(request, name)
        assert first.workers == second.workers, name
        assert (first.status, first.dispatch_order) == (second.status, second.dispatch_order), name


@PROPERTIES
@given(plan_requests())
def test_the_simulator_reproduces_each_workers_predicted_finish(request: PlanRequest) -> None:
    actual = {t.key: planned_steps(t.predicted_tokens) for t in request.trajectories}
    for name in POLICY_NAMES:
        static = dataclasses.replace(plan(request, name), dispatch_order=())  # each worker plays its queue
        played = simulate(static, request.trajectories, actual, request.inventory,
                          SimOptions(kv_admission=request.kv_admission))  # fmt: skip
        for wp in static.workers:
            assert wp.predicted_finish_s == pytest.approx(
                played.worker_finish_s[wp.worker_id], rel=1e-9, abs=1e-12
            )


def test_round_robin_deals_prompts_in_turn_whatever_their_length() -> None:
    request = bench_request(256, 4, seed=3)
    result = plan(request, "round_robin")
    where = _worker_of(result)
    for t in request.trajectories:
        assert where[t.key] == request.inventory.workers[int(t.prompt_id[1:]) % 4].worker_id
    position = {t.key: i for i, t in enumerate(request.trajectories)}
    assert list(result.workers[0].items) == sorted(result.workers[0].items, key=position.__getitem__)


def test_round_robin_keeps_a_group_on_its_turn_s_worker_when_that_one_can_hold_it() -> None:
    # every prompt needs 20,100 tokens of cache: w2 holds none, so its turn passes on to w0
    workers = tuple(
        Worker(w, device_profile("H100"), kv_capacity_tokens=cap)
        for w, cap in (("w0", 40_000), ("w1", 40_000), ("w2", 10_000))
    )
    batch = tuple(Trajectory(f"p{i}", s, 100, 20_000, 500.0) for i in range(3) for s in range(2))
    result = plan(PlanRequest(batch, Inventory(workers, model_preset("7b"))), "round_robin")
    where = _worker_of(result)
    assert [where[t.key] for t in batch] == ["w0", "w0", "w1", "w1", "w0", "w0"]


def test_least_loaded_gives_the_items_after_a_pinned_one_to_the_workers_still_free() -> None:
    # one sequence a worker: the pinned item holds w0, so the next three start at once on the others
    workers = tuple(Worker(f"w{i}", device_profile("H100"), max_num_seqs=1) for i in range(4))
    pinned = Trajectory("p0", 0, 100, 1_000, 500.0, pinned_worker="w0")
    batch = (pinned, *(Trajectory(f"p{i}", 0, 100, 1_000, 500.0) for i in range(1, 4)))
    result = plan(PlanRequest(batch, Inventory(workers, model_preset("7b"))), "least_loaded")
    assert [list(wp.items) for wp in result.workers] == [["p0#0"], ["p1#0"], ["p2#0"], ["p3#0"]]


def test_lpt_on_more_than_eight_workers_honours_pins_and_caches() -> None:
    # past eight workers lpt takes a specialised path for batches every worker may take whole
    workers = tuple(Worker(f"w{i}", device_profile("H100"), kv_capacity_tokens=40_000) for i in range(11))
    small = Worker("w11", device_profile("H100"), kv_capacity_tokens=2_000)
    pinned = tuple(Trajectory(f"p{i}", 0, 100, 1_000, 900.0, pinned_worker="w11") for i in range(3))
    large = tuple(Trajectory(f"q{i}", 0, 3_000, 1_000, 800.0 + i) for i in range(30))
    request = PlanRequest(pinned + large, Inventory((*workers, small), model_preset("7b")))
    where = _worker_of(plan(request, "lpt"))
    assert all(where[t.key] == "w11" for t in pinned)
    assert all(where[t.key] != "w11" for t in large)  # 4,000 tokens: past w11's cache


def test_least_loaded_dispatches_the_batch_in_input_order_from_one_shared_queue() -> None:
    request = bench_request(128, 4, seed=1)
    result = plan(request, "least_loaded")
    assert result.dispatch_order == tuple(t.key for t in request.trajectories)
    assert sum(len(wp.items) for wp in result.workers) == 128


def test_least_loaded_forecasts_a_batch_within_the_pools_slots_as_the_shared_queue_plays_it() -> None:
    """1,024 items on 8 workers of 256 slots: the shared queue hands every worker one item in turn,
    so the static queues must not give the first four workers all of them."""
    request = bench_request(1024, 8, seed=1)
    result = plan(request, "least_loaded")
    assert [len(wp.items) for wp in result.workers] == [128] * 8
    exact = {t.key: planned_steps(t.predicted_tokens) for t in request.trajectories}
    played = simulate(result, request.trajectories, exact, request.inventory).makespan_s
    assert result.predicted_makespan_s == pytest.approx(played, rel=1e-9)


def test_least_loaded_under_prefix_affinity_spreads_the_groups_over_the_pool() -> None:
    """A group's samples run side by side on one worker: a worker with hundreds of free slots takes
    its share of groups, not every group because each looked like one slot's work."""
    request = dataclasses.replace(bench_request(1024, 8, seed=1), prefix_affinity=True)
    result = plan(request, "least_loaded")
    sizes = [len(wp.items) for wp in result.workers]
    assert min(sizes) > 0
    assert max(sizes) <= 2 * 1024 / 8
    assert result.predicted_makespan_s < plan(request, "round_robin").predicted_makespan_s * 1.2


def test_length_aware_policies_beat_the_equal_split_on_a_mixed_inventory() -> None:
    request = dataclasses.replace(bench_request(512, 8, seed=2), time_budget_s=2.0)
    baseline = plan(request, "round_robin").predicted_makespan_s
    assert plan(request, "lpt").predicted_makespan_s * 1.5 <= baseline
    assert plan(request, "cpsat").predicted_makespan_s * 1.5 <= baseline

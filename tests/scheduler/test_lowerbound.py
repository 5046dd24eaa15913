"""The lower bound is physical: no simulated schedule beats it, and it is tight where it should be."""

from __future__ import annotations

import dataclasses

import pytest

from scheduler import clock
from scheduler.benchgen import bench_request
from scheduler.costmodel import worker_cost
from scheduler.devices import device_profile, model_preset
from scheduler.lowerbound import lower_bound
from scheduler.planner import plan
from scheduler.simulator import SimOptions, simulate, simulate_worker
from scheduler.stepsum import planned_steps
from scheduler.types import Inventory, PlanRequest, Trajectory, Worker

MODEL = model_preset("7b")


def _worker(worker_id: str, kind: str = "H100") -> Worker:
    return Worker(worker_id=worker_id, device=device_profile(kind), max_num_seqs=4, kv_capacity_tokens=40_000)


def _trajectory(prompt: str, prompt_tokens: int, predicted: float, pinned: str | None = None) -> Trajectory:
    return Trajectory(prompt, 0, prompt_tokens, 10_000, predicted, pinned_worker=pinned)


def test_one_trajectory_alone_on_the_fastest_worker_meets_the_bound_exactly() -> None:
    inventory = Inventory((_worker("slow", "Ascend910B"), _worker("fast", "H100")), MODEL)
    only = _trajectory("p", 500, 2_000.0)
    bound = lower_bound([only], inventory)
    alone = simulate_worker(inventory.workers[1], MODEL, [only]).finish_s
    assert bound.longest_s == pytest.approx(alone, rel=1e-12)
    assert bound.value_s == bound.longest_s


def test_a_pinned_trajectory_is_bounded_at_its_own_worker_speed() -> None:
    inventory = Inventory((_worker("slow", "Ascend910B"), _worker("fast", "H100")), MODEL)
    pinned = _trajectory("p", 500, 2_000.0, pinned="slow")
    bound = lower_bound([pinned], inventory)
    assert bound.longest_s == pytest.approx(simulate_worker(inventory.workers[0], MODEL, [pinned]).finish_s)


def test_throughput_and_kv_limits_follow_their_formulas() -> None:
    inventory = Inventory((_worker("a"), _worker("b", "Ascend910B")), MODEL)
    batch = [_trajectory(f"p{i}", 100 + i, 300.0 + 7 * i) for i in range(10)]
    bound = lower_bound(batch, inventory)
    costs = [worker_cost(w, MODEL) for w in inventory.workers]
    tokens = sum(planned_steps(t.predicted_tokens) for t in batch)
    kv = sum(t.prompt_tokens * (n := planned_steps(t.predicted_tokens)) + n * (n - 1) / 2 for t in batch)
    assert bound.throughput_s == pytest.approx(tokens / sum(c.peak_tps() for c in costs))
    assert bound.kv_s == pytest.approx(kv / sum(c.kv_token_steps_per_s() for c in costs))
    assert bound.value_s == max(bound.longest_s, bound.throughput_s, bound.kv_s, bound.tail_s)


def test_excluding_a_worker_raises_the_aggregate_limits() -> None:
    inventory = Inventory((_worker("a"), _worker("b")), MODEL)
    batch = [_trajectory(f"p{i}", 200, 900.0) for i in range(40)]
    full, drained = lower_bound(batch, inventory), lower_bound(batch, inventory, frozenset({"b"}))
    assert drained.kv_s == pytest.approx(2 * full.kv_s)
    assert drained.throughput_s == pytest.approx(2 * full.throughput_s)


def test_under_prefix_affinity_the_heaviest_group_alone_bounds_the_makespan() -> None:
    inventory = Inventory((_worker("a"), _worker("b")), MODEL)
    heavy = tuple(Trajectory("g", s, 300, 10_000, 4_000.0 + 10 * s) for s in range(4))
    light = tuple(Trajectory(f"p{i}", 0, 100, 10_000, 200.0) for i in range(4))
    request = PlanRequest(heavy + light, inventory, prefix_affinity=True)
    with clock.frozen():  # the plan's bound check stops at its deadline, short of (d) on a busy host
        together = plan(request, "lpt")
    split = lower_bound(request.trajectories, inventory)
    assert together.lower_bound_s > split.value_s  # the group cannot spread over both workers
    assert together.lower_bound_s <= together.predicted_makespan_s
    assert together.lower_bound_s == pytest.approx(together.predicted_makespan_s, rel=1e-3)  # lpt is optimal


def test_under_prefix_affinity_the_tail_bound_charges_each_group_at_its_longest_member() -> None:
    # a worker that hosts a group runs its longest member's steps and holds every member's cache:
    # a hard group's shorter samples cannot fill other workers' short tails, so (d) rises above
    # both the per-trajectory cover and the heaviest group alone, and still no play beats it
    request = dataclasses.replace(bench_request(512, 8, seed=4), prefix_affinity=True)
    spread = lower_bound(request.trajectories, request.inventory)
    grouped = lower_bound(request.trajectories, request.inventory, prefix_affinity=True)
    assert grouped.tail_s > max(spread.tail_s, grouped.longest_s, grouped.kv_s)
    actual = {t.key: planned_steps(t.predicted_tokens) for t in request.trajectories}
    for policy in ("lpt", "cpsat"):
        with clock.frozen():  # a plan's bound check stops at its deadline: on a busy host it stopped
            result = plan(request, policy)  # short of (d) (368.49 s of 368.80 s, CI on 2026-12-03)
        assert result.lower_bound_s == grouped.value_s
        for steal in (False, True):
            options = SimOptions(steal=steal, prefix_affinity=True)
            played = simulate(result, request.trajectories, actual, request.inventory, options)
            assert grouped.value_s <= played.makespan_s * (1 + 1e-9), (policy, steal)


def test_limit_a_credits_a_trajectory_on_the_worker_whose_cache_holds_it() -> None:
    # same device and speed, listed small cache first: only the second worker can run the trajectory
    small = dataclasses.replace(_worker("small"), kv_capacity_tokens=5_000)
    inventory = Inventory((small, _worker("big")), MODEL)
    only = _trajectory("p", 8_000, 2_000.0)  # needs 18,000 tokens of cache
    bound = lower_bound([only], inventory)
    assert bound.longest_s == pytest.approx(simulate_worker(inventory.workers[1], MODEL, [only]).finish_s)


def test_a_pinned_group_that_fills_its_workers_cache_exactly_still_bounds_the_makespan() -> None:
    # prompt + max_new_tokens equals the pinned worker's cache: validation accepts it, so must (a)
    exact = dataclasses.replace(_worker("a"), kv_capacity_tokens=10_300)
    inventory = Inventory((exact, _worker("b")), MODEL)
    group = [Trajectory("g", s, 300, 10_000, 3_000.0, pinned_worker="a") for s in range(4)]
    grouped = lower_bound(group, inventory, prefix_affinity=True)
    apart = lower_bound(group, inventory)
    assert grouped.longest_s > apart.longest_s  # four samples on one worker outlast any one of them

"""Limit (d): ramp-up, prefill and whole trajectories lift the bound, and no simulated play beats it."""

from __future__ import annotations

import random
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.benchgen import bench_request
from scheduler.costmodel import worker_cost
from scheduler.devices import device_profile, model_preset
from scheduler.kindlimits import KindLimits, kind_limits
from scheduler.lowerbound import _kinds, lower_bound
from scheduler.planner import plan
from scheduler.simulator import SimOptions, simulate
from scheduler.stepsum import planned_steps_array
from scheduler.tailbands import BandCover
from scheduler.tailbound import BAND_PRECISION, PRECISION, Timed, _search
from scheduler.types import Inventory, PlanRequest, Trajectory, Worker

MODEL = model_preset("7b")


def _limits(slots: int, capacity: float, prompt_head: float) -> KindLimits:
    return KindLimits(
        step_s=0.008,
        per_token_s=2e-8,
        prefill_s=3e-5,
        capacity=capacity,
        slots=slots,
        prompt_head=prompt_head,
    )


def _serves(lim: KindLimits, steps: float, makespan_s: float, rate: float) -> float:
    """Scalar reference of ``KindLimits.serves_many``: the module doc's formula, written plainly, with
    the crossing of U and A found by bisection instead of in closed form."""
    alpha = rate * lim.per_token_s / lim.prefill_s

    def value(n: float) -> float:
        chain = (makespan_s - lim.step_s * n) / lim.per_token_s
        return alpha * chain + (1.0 - alpha) * min(lim.ramp(n), chain)

    low, high = steps, max(steps, makespan_s / lim.step_s)  # A(N) < 0 past makespan / step_s
    if lim.ramp(low) < (makespan_s - lim.step_s * low) / lim.per_token_s:
        for _ in range(200):  # U - A rises: bisect its root
            middle = (low + high) / 2.0
            if lim.ramp(middle) < (makespan_s - lim.step_s * middle) / lim.per_token_s:
                low = middle
            else:
                high = middle
    return max(0.0, value(steps), value(low))


def test_the_ramp_never_claims_less_than_the_cache_can_hold_step_by_step() -> None:
    rng = random.Random(3)
    for _ in range(300):
        lim = _limits(rng.choice([1, 8, 256]), rng.uniform(1e4, 2e6), rng.uniform(0, 3e6))
        steps = rng.randint(1, 5_000)
        exact = sum(min(lim.capacity, lim.prompt_head + lim.slots * k) for k in range(steps))
        assert exact <= lim.ramp(steps) * (1 + 1e-12)


def test_a_worker_that_must_fill_its_cache_serves_less_than_a_full_cache_would() -> None:
    lim = _limits(slots=16, capacity=1e6, prompt_head=16 * 200)
    makespan = 100.0
    full = makespan / (lim.per_token_s + lim.step_s / lim.capacity)  # limit (c), one worker
    assert _serves(lim, 1, makespan, rate=0.0) < 0.9 * full


def test_the_smallest_prompts_fill_nothing_and_the_largest_fill_the_cache_at_once() -> None:
    worker = Worker("w", device_profile("H100"), max_num_seqs=2)
    cost = worker_cost(worker, MODEL)
    head = kind_limits(cost, np.array([10.0, 5_000.0, 7_000.0, 3.0]))
    assert head.prompt_head == 12_000.0


def _three_long_on_two_h100s() -> tuple[tuple[Trajectory, ...], Inventory, float, float]:
    """Three equal 32k-token trajectories on two H100s, with what one worker running two of them
    side by side needs, and what a fluid split (one and a half each) would."""
    workers = tuple(Worker(f"w{i}", device_profile("H100")) for i in range(2))
    length, prompt = 32_000, 100
    batch = tuple(Trajectory("p", i, prompt, length, float(length)) for i in range(3))
    lim = kind_limits(worker_cost(workers[0], MODEL), np.array([prompt] * 3, dtype=np.float64))
    kv = prompt * length + length * (length - 1) / 2
    two_on_one = lim.step_s * length + lim.per_token_s * 2 * kv
    fluid = lim.step_s * length + lim.per_token_s * 1.5 * kv
    return batch, Inventory(workers, MODEL), two_on_one, fluid


def test_whole_trajectories_cannot_be_split_across_workers_like_a_fluid() -> None:
    batch, inventory, two_on_one, fluid = _three_long_on_two_h100s()
    length = batch[0].max_new_tokens
    bound = lower_bound(batch, inventory)
    assert bound.value_s >= 0.995 * two_on_one > fluid
    result = simulate(
        plan(PlanRequest(batch, inventory), "lpt"), batch, {t.key: length for t in batch}, inventory
    )
    assert result.makespan_s >= bound.value_s


def test_a_bound_out_of_time_keeps_what_the_fluid_cover_proved_and_skips_the_whole_trajectory_check() -> None:
    batch, inventory, _, fluid = _three_long_on_two_h100s()
    full = lower_bound(batch, inventory)
    hurried = lower_bound(batch, inventory, deadline=time.perf_counter() - 1.0)
    assert fluid * (1 - 2 * PRECISION) <= hurried.value_s < full.value_s
    assert lower_bound(batch, inventory, deadline=time.perf_counter() + 60.0) == full


def test_a_bound_whose_fluid_search_is_out_of_time_keeps_the_closed_form_bounds() -> None:
    """Many worker kinds make each fluid probe cost ~12 ms; past its deadline none is started, and
    the bound is (a)-(c), still a bound and never above the full one."""
    batch, inventory, _, _ = _three_long_on_two_h100s()
    full = lower_bound(batch, inventory)
    past = time.perf_counter() - 1.0
    hurried = lower_bound(batch, inventory, deadline=past, fluid_deadline=past)
    assert hurried.value_s == max(hurried.longest_s, hurried.throughput_s, hurried.kv_s) <= full.value_s


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(1, 160),
    workers=st.integers(1, 4),
    seqs=st.sampled_from([1, 2, 4, 16]),
    policy=st.sampled_from(["round_robin", "least_loaded", "lpt"]),
    kv_admission=st.booleans(),
    resume=st.booleans(),
    steal=st.booleans(),
)
def test_no_play_beats_the_bound_where_ramp_up_and_prefill_bind(
    seed: int, n: int, workers: int, seqs: int, policy: str, kv_admission: bool, resume: bool, steal: bool
) -> None:
    rng = random.Random(seed)
    batch = tuple(
        Trajectory(f"q{i // 2}", i % 2, rng.randint(1, 3_000), 6_000, float(rng.randint(1, 6_000)))
        for i in range(n)
    )
    kinds = ("H100", "910B")
    pool = tuple(
        Worker(
            f"w{i}",
            device_profile(kinds[i % 2]),
            max_num_seqs=seqs,
            kv_capacity_tokens=rng.randint(9_000, 60_000),
        )
        for i in range(workers)
    )
    inventory = Inventory(pool, MODEL)
    request = PlanRequest(batch, inventory, time_budget_s=0.1, kv_admission=kv_admission)
    options = SimOptions(steal=steal, kv_admission=kv_admission, resume_preempted=resume)
    result = simulate(
        plan(request, policy), batch, {t.key: int(t.predicted_tokens) for t in batch}, inventory, options
    )
    for grid, precision in ((0, PRECISION), (8, 1e-4)):  # the plans' bound, and a refined one
        refined = lower_bound(batch, inventory, grid=grid, precision=precision)
        assert result.makespan_s >= refined.value_s * (1.0 - 1e-12)


def test_the_vectorised_capacity_is_the_scalar_reference() -> None:
    rng = random.Random(5)
    for _ in range(50):
        lim = _limits(rng.choice([1, 8, 256]), rng.uniform(1e4, 2e6), rng.uniform(0, 3e5))
        steps = np.array([rng.randint(1, 40_000) for _ in range(20)], dtype=np.float64)
        makespan, rate = rng.uniform(1.0, 600.0), rng.choice([0.0, 500.0, 1_500.0])
        many = lim.serves_many(steps, makespan, rate)
        for n, value in zip(steps, many, strict=True):
            assert value == pytest.approx(_serves(lim, float(n), makespan, rate), rel=1e-12, abs=1e-6)


def test_a_fast_memory_behind_a_slow_step_is_credited_what_its_steps_can_hold_at_every_makespan() -> None:
    # 670,000 GB/s and a 0.5 s overhead at time scale 0.001 (edge49): c / m is 5e9, and A at the
    # crossing, T / m - c N / m, came out 0 in floats, so a worker that runs 6 steps by 3 ms was
    # credited the 3 KV-token-steps of its 2 (a bound of 4.4 ms above a 2.7 ms play).
    lim = KindLimits(
        step_s=0.001 * (0.5 + 2.843e-5),
        per_token_s=1.0699e-13,
        prefill_s=3.08e-5,
        capacity=1.08e6,
        slots=1,
        prompt_head=1.0,
    )
    makespans = np.linspace(0.002, 0.005, 301)
    served = [float(lim.serves_many(np.array([2.0]), float(t), 0.0)[0]) for t in makespans]
    assert served == sorted(served)  # more time never serves less
    for t, value in zip(makespans, served, strict=True):
        assert value == pytest.approx(_serves(lim, 2.0, float(t), 0.0), rel=1e-6)
        assert value == pytest.approx(lim.ramp(t / lim.step_s), rel=1e-6)


@settings(max_examples=40, deadline=None)
@given(root=st.floats(1.0, 1e4), slope=st.floats(0.05, 50.0), kink=st.floats(0.1, 10.0))
def test_the_search_never_claims_past_the_root_and_closes_on_it(
    root: float, slope: float, kink: float
) -> None:
    def gap(t: float) -> float:  # falling, steeper (or flatter) past the root, like a shortfall
        return slope * (root - t) / root * (1.0 if t < root else kink)

    found = _search(gap, root / 3.0, PRECISION, Timed(None))
    assert found < root
    assert found >= root * (1.0 - 2.0 * PRECISION)


def test_the_bound_is_deterministic() -> None:
    request = bench_request(2_048, 16, seed=2)
    first = lower_bound(request.trajectories, request.inventory)
    assert lower_bound(request.trajectories, request.inventory) == first


def test_no_band_grid_proves_more_than_the_plans_bound_on_a_heavy_tail() -> None:
    # the plans' bound credits every worker at its own longest trajectory: a 1/32 grid of bands
    # (the benchmark's refined bound before) cannot prove a longer makespan impossible
    request = bench_request(1_024, 16, seed=0)
    batch, inventory = request.trajectories, request.inventory
    bound = lower_bound(batch, inventory)
    assert bound.tail_s > bound.kv_s
    costs = [worker_cost(w, MODEL) for w in inventory.workers]
    prompts = np.array([t.prompt_tokens for t in batch], dtype=np.float64)
    steps = planned_steps_array([t.predicted_tokens for t in batch])
    outputs = steps.astype(np.float64)
    limits = [(kind_limits(m[0], prompts), len(m)) for m in _kinds(costs)]
    exchange = min(lim.prefill_s / lim.per_token_s for lim, _ in limits)
    for rate in (0.0, exchange):
        demand = prompts * outputs + outputs * (outputs - 1.0) / 2.0 + rate * prompts
        bands = BandCover(steps, demand, limits, rate, grid=32)
        assert not bands.infeasible(bound.tail_s * (1.0 + BAND_PRECISION))

"""Extreme but valid requests: the planner's invariants hold at the edges of what validation accepts.

The shared strategies (``plan_strategies``) draw typical small requests; these draw the corners: one
trajectory or one worker, one-token lengths, equal lengths, caches exactly as large as the longest
trajectory needs (or a few tokens), one slot, kinds 10^6 times apart in speed, measured profiles a
thousand times off, pins that leave a single worker, and quantiles with p90 below p50.
"""

from __future__ import annotations

import dataclasses
import time

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from scheduler.costmodel import worker_cost
from scheduler.devices import DeviceProfile, device_profile, model_preset
from scheduler.planner import plan
from scheduler.policies import POLICY_NAMES
from scheduler.policies.problem import build_problem
from scheduler.simulator import SimOptions, simulate
from scheduler.types import Inventory, PlanRequest, Trajectory, Worker

EDGES = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KINDS = ("H100", "Ascend910B", "A100-80GB", "H200")
FACTORS = (1e-3, 1.0, 200.0)  # measured profile figures far off either way, within validation.RANGES


@st.composite
def edge_workers(draw: st.DrawFn, need: int) -> tuple[Worker, ...]:
    """1-4 workers; each cache is derived, exactly ``need`` (the batch's largest) or ``need`` x 4."""
    workers = []
    for i in range(draw(st.integers(1, 4))):
        device = device_profile(draw(st.sampled_from(KINDS)))
        if draw(st.booleans()):
            device = dataclasses.replace(
                device,
                hbm_bandwidth_gbs=device.hbm_bandwidth_gbs * draw(st.sampled_from(FACTORS)),
                peak_tflops=device.peak_tflops * draw(st.sampled_from(FACTORS)),
                step_overhead_s=draw(st.sampled_from((0.0, 0.002, 0.5))),
            )
        cache = draw(st.sampled_from((None, need, need * 4)))
        workers.append(
            Worker(
                f"w{i}",
                device,
                num_gpus=draw(st.sampled_from((1, 8))),
                max_num_seqs=draw(st.sampled_from((1, 2, 256))),
                kv_capacity_tokens=cache,
                time_scale=draw(st.sampled_from((1e-3, 1.0, 1e3))),
            )
        )
    return tuple(workers)


@st.composite
def edge_requests(draw: st.DrawFn) -> PlanRequest:
    """A valid request at the corners; predicted lengths are whole tokens, so they are exact."""
    shape = draw(st.sampled_from(("one-token", "equal", "mixed")))
    count = draw(st.integers(1, 16))
    groups = draw(st.integers(1, count))
    equal = draw(st.integers(1, 3_000))
    trajectories = []
    for i in range(count):
        cap = 1 if shape == "one-token" else draw(st.integers(1, 3_000))
        length = min(equal, cap) if shape == "equal" else draw(st.integers(1, cap))
        p50, p90 = draw(st.integers(1, 4_000)), draw(st.integers(1, 4_000))  # p90 < p50 allowed
        trajectories.append(
            Trajectory(
                f"g{i % groups}",
                i // groups,
                draw(st.sampled_from((1, 2_000))),
                cap,
                float(length),
                {0.5: float(p50), 0.9: float(p90)} if draw(st.booleans()) else {},
            )
        )
    workers = draw(edge_workers(max(t.prompt_tokens + t.max_new_tokens for t in trajectories)))
    ids = [w.worker_id for w in workers]
    excluded = frozenset(draw(st.sets(st.sampled_from(ids), max_size=len(ids) - 1)))
    allowed = [w for w in ids if w not in excluded]
    pin = draw(st.sampled_from((None, "one", "some")))
    if pin is not None:  # a pin binds a whole group, so prefix affinity may hold either way
        chosen = draw(st.sampled_from(allowed))
        pinned = {f"g{g}" for g in range(groups) if pin == "one" or draw(st.booleans())}
        trajectories = [
            dataclasses.replace(t, pinned_worker=chosen) if t.prompt_id in pinned else t for t in trajectories
        ]
    return PlanRequest(
        tuple(trajectories),
        Inventory(workers, model_preset(draw(st.sampled_from(("1.5b", "7b"))))),
        time_budget_s=0.3,
        prefix_affinity=draw(st.booleans()),
        kv_admission=draw(st.booleans()),
        excluded_workers=excluded,
        seed=draw(st.integers(0, 3)),
    )


# A fast memory behind a slow step (edge49): one slot, 670,000 GB/s, a 0.5 s overhead; the band
# cover credited the worker 3 KV-token-steps where its 5 steps hold 15, and bounded at 4.4 ms a
# batch every policy plays in 2.7 ms.
FAST_MEMORY_SLOW_STEP = PlanRequest(
    (Trajectory("g0", 0, 1, 2, 2.0, {}), Trajectory("g0", 1, 1, 1, 1.0, {})),
    Inventory(
        (
            Worker(
                "w0",
                DeviceProfile("H100", 670_000.0, 0.989, 80.0, 0.8, 0.5, 0.9, step_overhead_s=0.5),
                max_num_seqs=1,
                time_scale=0.001,
            ),
        ),
        model_preset("7b"),
    ),
    time_budget_s=0.3,
    prefix_affinity=True,
)


def _options(request: PlanRequest, steal: bool = False) -> SimOptions:
    return SimOptions(
        steal=steal,
        kv_admission=request.kv_admission,
        excluded_workers=request.excluded_workers,
        prefix_affinity=request.prefix_affinity,
    )


@EDGES
@given(edge_requests())
@example(FAST_MEMORY_SLOW_STEP)
def test_at_the_edges_every_trajectory_runs_once_where_it_may_and_no_play_beats_the_bound(
    request: PlanRequest,
) -> None:
    workers = {w.worker_id: w for w in request.inventory.workers}
    exact = {t.key: int(t.predicted_tokens) for t in request.trajectories}
    batch, inventory = request.trajectories, request.inventory
    for name in POLICY_NAMES:
        result = plan(request, name)
        where = {key: wp.worker_id for wp in result.workers for key in wp.items}
        assert sorted(key for wp in result.workers for key in wp.items) == sorted(exact), name
        for t in request.trajectories:
            worker = workers[where[t.key]]
            assert worker.worker_id not in request.excluded_workers, name
            assert t.pinned_worker in (None, worker.worker_id), name
            cap = worker_cost(worker, request.inventory.model).kv_capacity_tokens
            assert t.prompt_tokens + t.max_new_tokens <= cap, name
        for steal in (False, True):
            played = simulate(result, batch, exact, inventory, _options(request, steal))
            assert played.makespan_s >= result.lower_bound_s * (1 - 1e-9), (name, steal)
        if not result.dispatch_order:  # a static plan plays on exact lengths as predicted
            alone = simulate(result, batch, exact, inventory, _options(request))
            assert alone.makespan_s == pytest.approx(result.predicted_makespan_s, rel=1e-9), name


@EDGES
@given(
    cache=st.integers(2, 60),
    lengths=st.lists(st.integers(1, 30), min_size=1, max_size=12),
    kv_admission=st.booleans(),
)
def test_every_policy_plans_for_a_worker_whose_kv_cache_holds_only_a_few_tokens(
    cache: int, lengths: list[int], kv_admission: bool
) -> None:
    """A cache of under 50 tokens once rounded to zero in cpsat's repair model and divided by it."""
    tiny = Worker("tiny", device_profile("A100-80GB"), kv_capacity_tokens=cache)
    inventory = Inventory((tiny, Worker("big", device_profile("Ascend910B"))), model_preset("1.5b"))
    trajectories = tuple(Trajectory(f"p{i}", 0, 1, n, float(n)) for i, n in enumerate(lengths))
    request = PlanRequest(trajectories, inventory, time_budget_s=0.3, kv_admission=kv_admission)
    for name in POLICY_NAMES:
        result = plan(request, name)
        assert sorted(k for wp in result.workers for k in wp.items) == sorted(t.key for t in trajectories)


CORNERS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def envelope_corners(draw: st.DrawFn) -> PlanRequest:
    """Workers at the corners of what validation accepts (``validation.RANGES``), with lengths up
    to what their caches hold: makespans of up to ~1e18 s and KV-token-steps of ~1e18."""
    workers = []
    for i in range(draw(st.integers(1, 3))):
        device = dataclasses.replace(
            device_profile("H100"),
            hbm_bandwidth_gbs=draw(st.sampled_from((1.0, 1e6))),
            peak_tflops=draw(st.sampled_from((0.01, 1e6))),
            memory_gib=draw(st.sampled_from((80.0, 1e5))),
            step_overhead_s=draw(st.sampled_from((0.0, 1.0))),
            bandwidth_efficiency=draw(st.sampled_from((0.01, 1.0))),
        )
        cache = draw(st.sampled_from((None, 2, 2**31 - 1)))
        scale = draw(st.sampled_from((1e-3, 1e3)))
        workers.append(
            Worker(
                f"w{i}",
                device,
                num_gpus=draw(st.sampled_from((1, 64))),
                kv_capacity_tokens=cache,
                time_scale=scale,
            )
        )
    inventory = Inventory(tuple(workers), model_preset(draw(st.sampled_from(("1.5b", "32b")))))
    room = max(worker_cost(w, inventory.model).kv_capacity_tokens for w in workers)
    trajectories = []
    for i in range(draw(st.integers(1, 6))):
        prompt = draw(st.sampled_from((1, max(1, room // 2))))
        cap = max(1, min(draw(st.sampled_from((1, 1_000, 2**31 - 1))), room - prompt))
        trajectories.append(Trajectory(f"p{i}", 0, prompt, cap, float(draw(st.integers(1, cap)))))
    return PlanRequest(tuple(trajectories), inventory, time_budget_s=0.3, kv_admission=draw(st.booleans()))


@CORNERS
@given(envelope_corners())
def test_at_the_corners_of_the_accepted_ranges_every_policy_plans_every_trajectory(
    request: PlanRequest,
) -> None:
    """Billion-token lengths on the slowest profile once overflowed CP-SAT's 64-bit coefficients
    (cpsat's repair and the bound's band cover raised TypeError) where lpt planned."""
    for name in POLICY_NAMES:
        result = plan(request, name)
        assert sorted(k for wp in result.workers for k in wp.items) == sorted(
            t.key for t in request.trajectories
        )
        assert result.predicted_makespan_s >= result.lower_bound_s * (1 - 1e-9)


def test_least_loaded_deals_a_batch_pinned_to_one_worker_of_many_without_scanning_every_lane() -> None:
    """2,048 items pinned to one of 64 workers x 256 slots: each item once popped and pushed back
    every other worker's lanes (~25 s of CPU for a 0.5 s budget); now it looks at its worker alone."""
    workers = tuple(Worker(f"w{i}", device_profile("H100")) for i in range(64))
    trajectories = tuple(
        Trajectory(f"p{i}", 0, 100, 8_000, float(1 + i % 7_999), pinned_worker="w3") for i in range(2_048)
    )
    request = PlanRequest(trajectories, Inventory(workers, model_preset("7b")), time_budget_s=0.5)
    started = time.process_time()
    result = plan(request, "least_loaded")
    assert time.process_time() - started < 2.5  # 5x the budget; CPU time, so a loaded host does not count
    assert [len(wp.items) for wp in result.workers if wp.items] == [2_048]


def test_kv_steps_stay_exact_where_prompt_times_length_passes_int64() -> None:
    """Validation accepts a 64-GPU worker of 1e5 GiB each (a ~2.2e11-token cache); a prompt of half
    that with a 2**31-token cap once wrapped ``p*L`` in int64 to a negative KV load, which cpsat's
    repair model then carried as a variable with an empty domain (CP-SAT: MODEL_INVALID)."""
    giant = Worker("w0", dataclasses.replace(device_profile("H100"), memory_gib=1e5), num_gpus=64)
    inventory = Inventory((giant,), model_preset("1.5b"))
    prompt, cap = worker_cost(giant, inventory.model).kv_capacity_tokens // 2, 2**31 - 1
    trajectories = (Trajectory("p0", 0, prompt, cap, float(cap)), Trajectory("p1", 0, 1, 10, 10.0))
    problem = build_problem(PlanRequest(trajectories, inventory, time_budget_s=0.3))
    assert problem.kv_steps == (prompt * cap + cap * (cap - 1) / 2, 1 * 10 + 10 * 9 / 2)
    assert [u.kv_steps for u in problem.units] == list(problem.kv_steps)


def test_kv_steps_stay_exact_where_only_prompt_times_length_lies_between_2_63_and_2_64() -> None:
    """The int64 path is taken only where no product can reach 2**63, not 2**64: a prompt of 5e9
    tokens with a 2**31 - 1 cap (``p*L`` ~1.07e19, between the two) would wrap there to a negative
    KV load. The planner's validation accepts it on the 64-GPU worker of 1e5 GiB each."""
    giant = Worker("w0", dataclasses.replace(device_profile("H100"), memory_gib=1e5), num_gpus=64)
    inventory = Inventory((giant,), model_preset("1.5b"))
    prompt, cap = 5_000_000_000, 2**31 - 1
    assert 2**63 <= prompt * cap < 2**64
    trajectories = (Trajectory("p0", 0, prompt, cap, float(cap)),)
    problem = build_problem(PlanRequest(trajectories, inventory, time_budget_s=0.3))
    assert problem.kv_steps == (prompt * cap + cap * (cap - 1) / 2,)


def test_kv_steps_past_int64_are_the_one_by_one_floats_to_the_last_bit() -> None:
    """Past int64 the products are Python's exact ints, then one float addition, as the int64 path and
    every one-by-one sum round it: here the exact sum rounded once is one unit in the last place off."""
    giant = Worker("w0", dataclasses.replace(device_profile("H100"), memory_gib=1e5), num_gpus=64)
    inventory = Inventory((giant,), model_preset("1.5b"))
    prompt, cap = 17_980_415_036, 2_137_680_573
    assert prompt * cap + cap * (cap - 1) / 2 != float(prompt * cap + cap * (cap - 1) // 2)
    trajectories = (Trajectory("p0", 0, prompt, cap, float(cap)),)
    problem = build_problem(PlanRequest(trajectories, inventory, time_budget_s=0.3))
    assert problem.kv_steps == (prompt * cap + cap * (cap - 1) / 2,)


def test_a_trajectory_goes_only_to_a_worker_whose_cache_holds_its_prompt_and_its_cap() -> None:
    """A worker must keep a sequence it admits until its cap, prompt included: the small worker's
    cache holds the cap alone but not with the prompt, so only the big one may take the trajectory."""
    small = Worker("small", dataclasses.replace(device_profile("H100"), memory_gib=20.0), num_gpus=1)
    big = Worker("big", device_profile("H100"), num_gpus=1)
    inventory = Inventory((small, big), model_preset("1.5b"))
    room = worker_cost(small, inventory.model).kv_capacity_tokens
    assert room < worker_cost(big, inventory.model).kv_capacity_tokens
    trajectory = Trajectory("p0", 0, room // 2 + 1, room // 2 + 1, 100.0)
    problem = build_problem(PlanRequest((trajectory,), inventory, time_budget_s=0.3))
    assert [unit.allowed for unit in problem.units] == [(1,)]

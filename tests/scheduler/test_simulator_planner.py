"""The simulator against the planner: predicted finishes reproduce exactly, and no play beats the bound."""

from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import clock
from scheduler.costmodel import worker_cost
from scheduler.devices import device_profile, model_preset
from scheduler.finish import worker_finish
from scheduler.lowerbound import lower_bound
from scheduler.planner import plan
from scheduler.policies import POLICY_NAMES
from scheduler.sim_rules import ENGINES
from scheduler.simulator import SimOptions, simulate, simulate_worker, with_engine
from scheduler.stepsum import planned_steps
from scheduler.types import Inventory, PlanRequest, Trajectory, Worker

MODEL = model_preset("7b")
AGREEMENT = 1e-9  # relative; docs/simulator.md states it
V1_VLLM_WORKER_AGREEMENT = 0.35  # relative, a worker's finish: a V1 play under vLLM admission (measured
V1_VLLM_MAKESPAN_AGREEMENT = 0.15  # at most 30% and 12% on such pools; docs/simulator.md states them)


def batch(seed: int, n: int, longest: int) -> tuple[Trajectory, ...]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        tokens = min(longest, max(1, int(rng.lognormvariate(6.5, 1.0))))
        out.append(Trajectory(f"q{i // 4}", i % 4, rng.randint(16, 1_500), tokens, float(tokens)))
    return tuple(out)


def mixed(count: int, seqs: int, cap: int | None = None) -> Inventory:
    kinds = ("H100", "910B", "A100", "H200")
    workers = tuple(
        Worker(f"w{i}", device_profile(kinds[i % 4]), max_num_seqs=seqs, kv_capacity_tokens=cap)
        for i in range(count)
    )
    return Inventory(workers, MODEL)


@pytest.mark.parametrize("policy", POLICY_NAMES)
@pytest.mark.parametrize("kv_admission", [False, True])
def test_playing_a_plans_queues_on_exact_lengths_reproduces_every_predicted_finish(
    policy: str, kv_admission: bool
) -> None:
    trajectories = batch(seed=7, n=600, longest=12_000)
    inventory = mixed(6, seqs=32, cap=120_000)  # small enough that KV admission and preemption matter
    request = PlanRequest(trajectories, inventory, time_budget_s=0.2, kv_admission=kv_admission)
    planned = plan(request, policy)
    static = dataclasses.replace(planned, dispatch_order=())  # each worker's predicted queue, as planned
    actual = {t.key: int(t.predicted_tokens) for t in trajectories}
    result = simulate(static, trajectories, actual, inventory, SimOptions(kv_admission=kv_admission))
    for wp in planned.workers:
        assert result.worker_finish_s[wp.worker_id] == pytest.approx(wp.predicted_finish_s, rel=AGREEMENT)
    assert result.makespan_s == pytest.approx(planned.predicted_makespan_s, rel=AGREEMENT)


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_under_vllm_admission_a_v1_play_of_exact_lengths_departs_from_the_plan_within_its_tolerance(
    policy: str,
) -> None:
    """The planner's finish model is V0's (``scheduler.sim_rules``): under vLLM admission a V1 play
    evicts at other steps (no watermark) and loses less to an eviction (the output is kept), so the
    plan's finishes are not what V1 plays, only near them. Measured over four KV-bound pools of this
    kind, every policy: a worker -30% to +8%, the makespan -12% to +8%; on the long chain-of-thought
    headline (oracle, steps 3-5) a worker within 3.3%, the makespan +1.1% to +1.7%
    (docs/experiments.md, v1plan). Projected-peak admission agrees exactly in both engines
    (``test_sim_engines``)."""
    trajectories = batch(seed=7, n=600, longest=12_000)
    inventory = mixed(6, seqs=64, cap=40_000)  # a few of the longest at once: evictions on every worker
    request = PlanRequest(trajectories, inventory, time_budget_s=0.2, kv_admission=False)
    with clock.frozen():  # the same plan whatever the host's load
        planned = plan(request, policy)
    static = dataclasses.replace(planned, dispatch_order=())
    actual = {t.key: int(t.predicted_tokens) for t in trajectories}
    result = simulate(static, trajectories, actual, inventory, with_engine(SimOptions(), "vllm-v1"))
    assert result.preemptions > 0
    finish = result.worker_finish_s
    departures = [finish[wp.worker_id] / wp.predicted_finish_s - 1.0 for wp in planned.workers]
    assert max(map(abs, departures)) <= V1_VLLM_WORKER_AGREEMENT
    assert result.makespan_s == pytest.approx(planned.predicted_makespan_s, rel=V1_VLLM_MAKESPAN_AGREEMENT)
    assert max(map(abs, departures)) > 1e-3  # not the V0 play's agreement: the finish model is not V1's


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(1, 120),
    workers=st.integers(1, 5),
    seqs=st.sampled_from([1, 4, 64]),
    tight_kv=st.booleans(),
    policy=st.sampled_from(["round_robin", "least_loaded", "lpt"]),
    steal=st.booleans(),
    kv_admission=st.booleans(),
    engine=st.sampled_from(list(ENGINES)),
)
def test_no_simulated_makespan_is_below_the_lower_bound(
    seed: int,
    n: int,
    workers: int,
    seqs: int,
    tight_kv: bool,
    policy: str,
    steal: bool,
    kv_admission: bool,
    engine: str,
) -> None:
    trajectories = batch(seed, n, longest=20_000)
    cap = max(t.prompt_tokens + t.max_new_tokens for t in trajectories) + 500 if tight_kv else None
    inventory = mixed(workers, seqs, cap)
    planned = plan(PlanRequest(trajectories, inventory, time_budget_s=0.1, kv_admission=kv_admission), policy)
    actual = {t.key: int(t.predicted_tokens) for t in trajectories}
    options = with_engine(SimOptions(steal=steal, kv_admission=kv_admission), engine)
    result = simulate(planned, trajectories, actual, inventory, options)
    bound = lower_bound(trajectories, inventory).value_s
    assert result.makespan_s >= bound * (1.0 - 1e-12)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(1, 150),
    workers=st.integers(1, 4),
    seqs=st.sampled_from([2, 16, 256]),
    spare=st.integers(0, 30_000),
    policy=st.sampled_from(["least_loaded", "lpt", "round_robin"]),
    steal=st.booleans(),
    engine=st.sampled_from(list(ENGINES)),
)
def test_under_kv_admission_no_trajectory_is_ever_preempted_on_exact_lengths(
    seed: int, n: int, workers: int, seqs: int, spare: int, policy: str, steal: bool, engine: str
) -> None:
    trajectories = batch(seed, n, longest=20_000)
    cap = max(t.prompt_tokens + t.max_new_tokens for t in trajectories) + spare  # KV-bound on purpose
    inventory = mixed(workers, seqs, cap)
    planned = plan(PlanRequest(trajectories, inventory, time_budget_s=0.1, kv_admission=True), policy)
    actual = {t.key: int(t.predicted_tokens) for t in trajectories}
    options = with_engine(SimOptions(steal=steal, kv_admission=True), engine)
    result = simulate(planned, trajectories, actual, inventory, options)
    assert result.preemptions == 0  # static queues, a shared queue (least_loaded) and steals alike


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(1, 200),
    kind=st.sampled_from(["H100", "910B"]),
    seqs=st.sampled_from([1, 8, 256]),
    spare=st.integers(0, 40_000),
)
def test_the_finish_model_plays_any_queue_as_the_simulator_does_under_kv_admission(
    seed: int, n: int, kind: str, seqs: int, spare: int
) -> None:
    trajectories = batch(seed, n, longest=20_000)
    cap = max(t.prompt_tokens + t.max_new_tokens for t in trajectories) + spare
    w = Worker("w", device_profile(kind), max_num_seqs=seqs, kv_capacity_tokens=cap)
    played = simulate_worker(w, MODEL, trajectories, kv_admission=True)
    steps = [planned_steps(t.predicted_tokens) for t in trajectories]
    predicted = worker_finish(
        worker_cost(w, MODEL), [t.prompt_tokens for t in trajectories], steps, reserve=True
    )
    assert played.preemptions == 0
    assert played.finish_s == pytest.approx(predicted, rel=AGREEMENT)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(1, 150),
    workers=st.integers(1, 3),
    spare=st.integers(0, 20_000),
    error=st.sampled_from([0.2, 1.0, 5.0]),
    steal=st.booleans(),
    resume=st.booleans(),
)
def test_under_kv_admission_mispredicted_lengths_still_complete_every_trajectory(
    seed: int, n: int, workers: int, spare: int, error: float, steal: bool, resume: bool
) -> None:
    trajectories = tuple(  # room for true lengths up to five times the prediction
        dataclasses.replace(t, max_new_tokens=5 * t.max_new_tokens) for t in batch(seed, n, longest=20_000)
    )
    rng = random.Random(seed)  # true lengths a fifth of the prediction, or anywhere within 5x of it
    actual = {
        t.key: int(t.predicted_tokens * (rng.uniform(1 / error, error) if error > 1 else error))
        for t in trajectories
    }
    cap = max(t.prompt_tokens + t.max_new_tokens for t in trajectories) + spare
    inventory = mixed(workers, 16, cap)
    planned = plan(PlanRequest(trajectories, inventory, time_budget_s=0.1, kv_admission=True), "lpt")
    options = SimOptions(steal=steal, kv_admission=True, resume_preempted=resume)
    result = simulate(planned, trajectories, actual, inventory, options)
    assert [r.output_tokens for r in result.items] == [actual[t.key] for t in trajectories]
    assert all(r.end_s >= r.start_s >= 0.0 for r in result.items)

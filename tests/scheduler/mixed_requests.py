"""Plan requests on mixed pools (H100 and Ascend 910B) that more than one scheduler test plans, kept
here so that each is built one way: the frozen clock's and the give-up's 256 items on four workers
(every stage and timed phase has work to do), and the 32 x 16 batch with one prompt of great spread
that the bar holds to round robin (the length-blind bar's and the late stages' tests); the grouped
short chain-of-thought batch the at-once, bar and draws tests plan (``grouped_request``), and the
batch ``bench service`` asks for (``service_batch``)."""

from __future__ import annotations

import numpy as np

from scheduler.devices import device_profile, model_preset
from scheduler.types import Inventory, Plan, PlanRequest, Trajectory, Worker

CAP = 8_192  # the 256 items' max_new_tokens
LATER = 60.0  # a plan's budget far enough away for everything ``grouped_request`` is planned for


def mixed_request(hard_deadline: float | None = None, slots: int = 256) -> PlanRequest:
    """256 items with p50 and p90 on 2 H100 and 2 Ascend 910B: every stage and timed phase has work
    to do (the hedge, placing again by kind, cpsat's rounds, repair and robust choice); with fewer
    ``slots`` than the 64 items a worker gets, its queue runs in waves and is played."""
    rng = np.random.default_rng(11)
    batch = []
    for i in range(256):
        median = float(rng.uniform(0.2, 0.97)) * CAP
        batch.append(Trajectory(f"p{i}", 0, 200, CAP, median, {0.5: median, 0.9: min(CAP, median * 1.6)}))
    h100, ascend = device_profile("H100"), device_profile("Ascend910B")
    workers = [Worker(f"h100-{j}", h100, 1, slots, 300_000) for j in range(2)]
    workers += [Worker(f"a910b-{j}", ascend, 1, slots, 200_000) for j in range(2)]
    inventory = Inventory(tuple(workers), model_preset("7b"))
    return PlanRequest(tuple(batch), inventory, time_budget_s=2.0, hard_deadline=hard_deadline)


def one_wide_prompt_request() -> PlanRequest:
    """32 prompts x 16 with quantiles on an H100 and an Ascend 910B, tight predictions but for one
    prompt of great spread (p90 ten times its p50, as synth-000243 of the short-cot 256 x 16 trace):
    the bar asks the draws of this plan (``blind_draws.outlived``) whenever it has the time."""
    workers = (Worker("h100-0", device_profile("H100")), Worker("ascend-0", device_profile("Ascend910B")))
    batch = tuple(
        Trajectory(f"p{g}", s, 40, 4_096, 250.0 + 10 * g, {0.5: 250.0 + 10 * g, 0.9: p90})
        for g in range(32)
        for p90 in [2_500.0 if g == 0 else 1.25 * (250.0 + 10 * g)]
        for s in range(16)
    )
    return PlanRequest(batch, Inventory(workers, model_preset("7b")), time_budget_s=0.25, kv_admission=True)


def decisions(p: Plan) -> tuple[object, ...]:
    """Everything a plan decided (its wall time is a measurement, not a decision)."""
    return p.workers, p.dispatch_order, p.status, p.predicted_makespan_s, p.lower_bound_s


def grouped_request(
    h100s: int = 2, ascends: int = 2, slots: int = 256, quantiles: bool = True, long_cot: bool = False
) -> PlanRequest:
    """16 prompts x 4 samples of short chain-of-thought (p50 300-1,500 tokens, p90 10% above: as
    sure of itself as the math100 predictor), on H100s and Ascend 910Bs that hold it all at once;
    ``long_cot``: 64 prompts x 4 samples of 18-22k tokens (cap 32k), which no cache holds at once."""
    rng = np.random.default_rng(3)
    prompts, low, high, cap = (64, 18_000.0, 22_000.0, 32_768) if long_cot else (16, 300.0, 1_500.0, 4_096)
    batch = []
    for p in range(prompts):
        median = float(rng.uniform(low, high))
        for s in range(4):
            p50 = median * float(rng.uniform(0.9, 1.1))
            spread = {0.5: p50, 0.9: 1.1 * p50} if quantiles else {}
            batch.append(Trajectory(f"q{p}", s, 150, cap, p50, spread))
    h100, ascend = device_profile("H100"), device_profile("Ascend910B")
    workers = [Worker(f"h100-{j}", h100, max_num_seqs=slots) for j in range(h100s)]
    workers += [Worker(f"a910b-{j}", ascend, max_num_seqs=slots) for j in range(ascends)]
    inventory = Inventory(tuple(workers), model_preset("7b"))
    return PlanRequest(tuple(batch), inventory, kv_admission=True, time_budget_s=LATER)


def service_batch(prompts: int, workers: int, seed: int, budget_s: float = 0.08) -> PlanRequest:
    """As ``bench service`` asks: 16 samples a prompt, p90 near 1.8x p50, a 16,384-token cap, half
    H100 and half Ascend 910B at 256 slots, no KV admission: the whole batch at once."""
    rng = np.random.default_rng(seed)
    batch = []
    for p in range(prompts):
        prompt, median = int(rng.integers(100, 800)), float(rng.lognormal(7.3, 0.5))
        for s in range(16):
            p50 = median * float(rng.uniform(0.8, 1.2))
            p90 = p50 * float(rng.uniform(1.6, 2.0))
            batch.append(Trajectory(f"b{p}", s, prompt, 16_384, p50, {0.5: p50, 0.9: p90}))
    h100, ascend = device_profile("H100"), device_profile("Ascend910B")
    pool = [Worker(f"h-{j}", h100, max_num_seqs=256) for j in range(workers // 2)]
    pool += [Worker(f"a-{j}", ascend, max_num_seqs=256) for j in range(workers // 2)]
    inventory = Inventory(tuple(pool), model_preset("7b"))
    return PlanRequest(tuple(batch), inventory, kv_admission=False, time_budget_s=budget_s, seed=seed)

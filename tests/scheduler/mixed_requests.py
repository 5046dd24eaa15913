"""Plan requests on mixed pools (H100 and Ascend 910B) that more than one scheduler test plans, kept
here so that each is built one way: the frozen clock's and the give-up's 256 items on four workers
(every stage and timed phase has work to do), and the 32 x 16 batch with one prompt of great spread
that the bar holds to round robin (the length-blind bar's and the late stages' tests)."""

from __future__ import annotations

import numpy as np

from scheduler.devices import device_profile, model_preset
from scheduler.types import Inventory, Plan, PlanRequest, Trajectory, Worker

CAP = 8_192  # the 256 items' max_new_tokens


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

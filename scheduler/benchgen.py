"""Seeded heavy-tailed rollout batches and mixed inventories for the solver benchmark and tests.

The shape follows published long chain-of-thought rollout statistics (see scheduler/../data README):
GRPO groups of ``samples`` responses per prompt, a per-prompt difficulty drawn log-normally (median
output near 6k tokens), a within-group spread of about 35%, and a hard generation cap at which a
sizeable share is truncated. Prompts are log-normal around 400 tokens. Everything is a pure function
of the seed, so two runs of the benchmark plan exactly the same batches.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from scheduler.devices import ModelPreset, device_profile, model_preset
from scheduler.types import Inventory, PlanRequest, Trajectory, Worker

MAX_NEW_TOKENS = 32_768  # generation cap of the synthetic batches (long chain-of-thought setting)
SPEED_STREAM = 7  # the speed draws' own stream, so a spread leaves the batch's lengths as they are


def heavy_tailed_batch(
    trajectories: int, seed: int, samples: int = 8, median_output: float = 6_000.0
) -> tuple[Trajectory, ...]:
    """``trajectories`` responses in groups of ``samples`` with log-normal, capped output lengths."""
    rng = np.random.default_rng(seed)
    groups = -(-trajectories // samples)
    difficulty = rng.lognormal(np.log(median_output), 0.8, size=groups)
    prompt_len = np.clip(rng.lognormal(np.log(400.0), 0.6, size=groups), 32, 4_096).astype(int)
    spread = rng.lognormal(0.0, 0.35, size=(groups, samples))
    outputs = np.clip(difficulty[:, None] * spread, 16, MAX_NEW_TOKENS)
    batch: list[Trajectory] = []
    for index in range(trajectories):
        group, sample = divmod(index, samples)
        batch.append(
            Trajectory(
                prompt_id=f"p{group}",
                sample_idx=sample,
                prompt_tokens=int(prompt_len[group]),
                max_new_tokens=MAX_NEW_TOKENS,
                predicted_tokens=float(round(outputs[group, sample])),
            )
        )
    return tuple(batch)


def mixed_inventory(workers: int, model: ModelPreset | None = None, max_num_seqs: int = 256) -> Inventory:
    """Half H100, half Ascend 910B (the H100s first), each one engine on one device."""
    h100, ascend = device_profile("H100"), device_profile("Ascend910B")
    pool = tuple(
        Worker(
            worker_id=f"{'h100' if i < workers // 2 else 'a910b'}-{i}",
            device=h100 if i < workers // 2 else ascend,
            max_num_seqs=max_num_seqs,
        )
        for i in range(workers)
    )
    return Inventory(workers=pool, model=model or model_preset("7b"))


def bench_request(trajectories: int, workers: int, seed: int, time_budget_s: float = 0.25) -> PlanRequest:
    """The benchmark's request at one size: a heavy-tailed batch on a mixed inventory."""
    return PlanRequest(
        trajectories=heavy_tailed_batch(trajectories, seed),
        inventory=mixed_inventory(workers),
        time_budget_s=time_budget_s,
        seed=seed,
    )


def with_speed_spread(request: PlanRequest, spread: float, seed: int) -> PlanRequest:
    """``request`` with every worker's ``time_scale`` drawn uniformly in ``[1 - spread, 1 + spread]``:
    the pool as the service sees it once it has learned each worker's speed from its actuals
    (``service.speeds.model``, one scale a worker), which no two workers then share. ``spread`` 0
    returns ``request`` itself."""
    if spread == 0:
        return request
    rng = np.random.default_rng((SPEED_STREAM, seed))
    workers = request.inventory.workers
    scales = rng.uniform(1.0 - spread, 1.0 + spread, size=len(workers)).tolist()
    drawn = tuple(dataclasses.replace(w, time_scale=s) for w, s in zip(workers, scales, strict=True))
    return dataclasses.replace(request, inventory=dataclasses.replace(request.inventory, workers=drawn))


def with_quantiles(request: PlanRequest, p90_ratio: float) -> PlanRequest:
    """``request`` with every trajectory's quantiles: its prediction as p50 and ``p90_ratio`` times it
    (within its cap) as p90, the shape the service's predictors send. Why: without quantiles the
    policies' hedges (``robust_order``, ``robust_place``, the bar) return before any pricing, so the
    benchmark's batches never show what a hedge costs or changes. ``p90_ratio`` 0 returns ``request``."""
    if p90_ratio == 0:
        return request
    hedged = tuple(
        dataclasses.replace(
            t,
            quantiles={
                0.5: t.predicted_tokens,
                0.9: min(float(t.max_new_tokens), p90_ratio * t.predicted_tokens),
            },
        )
        for t in request.trajectories
    )
    return dataclasses.replace(request, trajectories=hedged)

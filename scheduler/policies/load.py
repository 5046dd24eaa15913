"""A worker's load as four sums, and the time that load needs at least: the placement model.

Placement search cannot afford the event-driven worker model (``scheduler.finish``) for every
candidate move, so it balances a closed-form estimate built from the same cost model. A worker that
runs ``N`` decode steps for a set of trajectories with ``K`` KV-token-steps, ``D`` decode tokens and
``P`` prompt tokens needs at least

    N >= max(longest run, K / kv_capacity, D / max_num_seqs)     (one token per sequence per step)
    T >= time_scale * (max(N * (mem_base + overhead) + mem_per_token * K,
                           N * overhead + flops_per_seq * D + flops_per_token * K)
                       + prefill_per_token * P)

because every step reads the weights once and the cached context, and the steps' contexts add up to
``K``. With a full cache (``kv_capacity``) that is a per-worker lower bound; placement plans with a
cache ``KV_FILL`` full, which is what a KV-bound engine sustains. Balancing this estimate balances
what the engines must do while staying monotone and additive: exactly what LPT and CP-SAT need. The
planner still reports finish times from ``scheduler.finish``.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.costmodel import WorkerCost
from scheduler.policies.problem import Unit

# Share of the KV cache a busy worker keeps filled on average. Admission under a 1% watermark,
# recompute preemption and the final drain keep it below 1: measured with scheduler.finish on
# KV-bound heavy-tailed queues (512 per worker), simulated finish ran 1.05-1.15x the full-cache
# estimate. Planning with 0.9 steers placement away from over-filled workers; 1.0 gives the bound.
KV_FILL = 0.9


@dataclass(slots=True)
class Load:
    """The running totals of one worker's assigned units (mutable: policies accumulate into it)."""

    steps: int = 0  # longest assigned run, decode steps
    tokens: int = 0  # decode tokens
    kv_steps: float = 0.0  # KV-token-steps
    prompt_tokens: int = 0  # prefill tokens

    def add(self, unit: Unit) -> None:
        """Account for ``unit`` on this worker."""
        self.steps = max(self.steps, unit.steps)
        self.tokens += unit.tokens
        self.kv_steps += unit.kv_steps
        self.prompt_tokens += unit.prompt_tokens


def load_time(cost: WorkerCost, steps: int, tokens: float, kv_steps: float, prompt_tokens: float) -> float:
    """Seconds the worker of ``cost`` needs at least for a load with these totals (see module doc)."""
    if tokens <= 0:
        return 0.0
    n = max(float(steps), kv_steps / (KV_FILL * cost.kv_capacity_tokens), tokens / cost.max_num_seqs)
    mem = n * (cost.mem_base_s + cost.overhead_s) + cost.mem_per_token_s * kv_steps
    cmp = n * cost.overhead_s + cost.flops_per_seq_s * tokens + cost.flops_per_token_s * kv_steps
    return cost.time_scale * (max(mem, cmp) + cost.prefill_per_token_s * prompt_tokens)


def time_with(cost: WorkerCost, load: Load, unit: Unit | None = None) -> float:
    """``load_time`` of ``load``, plus ``unit`` when given (a candidate move, evaluated not applied)."""
    if unit is None:
        return load_time(cost, load.steps, load.tokens, load.kv_steps, load.prompt_tokens)
    return load_time(
        cost,
        max(load.steps, unit.steps),
        load.tokens + unit.tokens,
        load.kv_steps + unit.kv_steps,
        load.prompt_tokens + unit.prompt_tokens,
    )

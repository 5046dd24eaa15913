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

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from scheduler.costmodel import WorkerCost
from scheduler.policies.problem import Problem, Unit

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


def load_of(problem: Problem, units: Sequence[int]) -> Load:
    """The load of ``problem``'s ``units``, as ``Load.add`` of each in turn would total it. Where
    every unit is one trajectory, from the problem's columns at C speed (``Problem.item_totals``):
    cpsat's calibration re-added every unit of a round one call at a time, ~9 ms at 4,096 x 32."""
    if len(problem.units) == len(problem.steps):  # unit u is trajectory u
        return Load(*problem.item_totals(units))
    load = Load()
    for u in units:
        load.add(problem.units[u])
    return load


@dataclass(frozen=True, slots=True)
class Rates:
    """A worker's cost coefficients, pre-multiplied for the estimate (it runs a million times a plan)."""

    step_s: float  # time_scale * (mem_base + overhead): the per-step floor of a memory-bound step
    kv_s: float  # time_scale * mem_per_token: per KV-token-step read
    per_full_cache: float  # 1 / (KV_FILL * kv_capacity): steps per KV-token-step, cache kept full
    per_slot: float  # 1 / max_num_seqs: steps per decode token, every slot busy
    overhead_s: float  # time_scale * overhead: the per-step floor of a compute-bound step
    seq_s: float  # time_scale * flops_per_seq
    token_s: float  # time_scale * flops_per_token
    prefill_s: float  # time_scale * prefill_per_token


@lru_cache(maxsize=4096)
def rates(cost: WorkerCost) -> Rates:
    """The estimate's coefficients for ``cost``'s worker."""
    ts = cost.time_scale
    return Rates(
        step_s=ts * (cost.mem_base_s + cost.overhead_s),
        kv_s=ts * cost.mem_per_token_s,
        per_full_cache=1.0 / (KV_FILL * cost.kv_capacity_tokens),
        per_slot=1.0 / cost.max_num_seqs,
        overhead_s=ts * cost.overhead_s,
        seq_s=ts * cost.flops_per_seq_s,
        token_s=ts * cost.flops_per_token_s,
        prefill_s=ts * cost.prefill_per_token_s,
    )


def estimate(r: Rates, steps: int, tokens: float, kv_steps: float, prompt_tokens: float) -> float:
    """Seconds a worker with rates ``r`` needs for a load with these totals (see module doc)."""
    if tokens <= 0:
        return 0.0
    n: float = steps  # the max() of three, without the call: this runs a million times a plan
    if kv_steps * r.per_full_cache > n:
        n = kv_steps * r.per_full_cache
    if tokens * r.per_slot > n:
        n = tokens * r.per_slot
    mem = n * r.step_s + r.kv_s * kv_steps
    cmp = n * r.overhead_s + r.seq_s * tokens + r.token_s * kv_steps
    return (mem if mem > cmp else cmp) + r.prefill_s * prompt_tokens


def time_with(cost: WorkerCost, load: Load, unit: Unit | None = None) -> float:
    """Seconds the worker of ``cost`` needs for ``load`` (see module doc), plus ``unit`` when given (a
    candidate move, evaluated not applied)."""
    r = rates(cost)
    if unit is None:
        return estimate(r, load.steps, load.tokens, load.kv_steps, load.prompt_tokens)
    return estimate(
        r,
        load.steps if load.steps > unit.steps else unit.steps,
        load.tokens + unit.tokens,
        load.kv_steps + unit.kv_steps,
        load.prompt_tokens + unit.prompt_tokens,
    )

"""What bounds one worker kind's work by a makespan (limit (d) of the lower bound, ``scheduler.tailbound``).

A kind's step, token and prefill costs and its cache's ramp-up (``KindLimits``) give the most demand
a worker of it serves by a makespan while running at least a given number of steps: the capacity
formula of ``scheduler.tailbound``'s module doc. ``AtLengths`` keeps a kind's capacity at a fixed
set of lengths for probe after probe: the bound's fluid searches ask for it at the same lengths 10-15
times a bound, and the terms that depend on neither the makespan nor the rate were recomputed every
time (the capacities were a quarter of the bound's time at 4,096 x 32, about half of it those terms
and the crossing in numpy scalars: docs/experiments.md, bound52).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from scheduler.costmodel import WorkerCost
from scheduler.stepsum import FloatArray


@dataclass(frozen=True, slots=True)
class KindLimits:
    """What bounds one worker kind's work by a makespan: step, token and prefill costs, and ramp-up."""

    step_s: float  # c: seconds every decode step costs (weights read + overhead)
    per_token_s: float  # m: seconds per cached token per decode step
    prefill_s: float  # pp: seconds per prefilled prompt token
    capacity: float  # KV cache, tokens
    slots: int  # S: max_num_seqs
    prompt_head: float  # P_S: the S largest prompts of the batch, summed

    def ramp(self, steps: float) -> float:
        """U(N): the most KV-token-steps ``steps`` decode steps can serve (a real ``N`` interpolates)."""
        fill = max(0.0, (self.capacity - self.prompt_head) / self.slots)  # steps until the cache can be full
        if steps <= fill:
            return steps * self.prompt_head + self.slots * steps * (steps - 1.0) / 2.0
        return self.ramp(fill) + self.capacity * (steps - fill)

    def crossing(self, makespan_s: float) -> float:
        """The N >= 0 where U(N) meets A(N): U rises and A falls, so there is one (closed form), in
        plain floats (``_filling_root``'s arithmetic on one makespan: the same float)."""
        slope = self.step_s / self.per_token_s  # A(N) = makespan / m - slope * N
        budget = makespan_s / self.per_token_s
        fill = max(0.0, (self.capacity - self.prompt_head) / self.slots)
        b = self.prompt_head - self.slots / 2.0 + slope  # S/2 N^2 + b N - budget = 0 while filling
        square = b * b + 2.0 * self.slots * budget
        root = math.sqrt(square) if square >= 0.0 else math.nan
        n = 2.0 * budget / (b + root) if b > 0.0 else (root - b) / self.slots
        if n > fill:  # past the ramp: U(fill) + cap * (N - fill) = budget - slope * N
            n = (budget - self.ramp(fill) + self.capacity * fill) / (self.capacity + slope)
        return max(0.0, n)

    def _crossings(self, makespans: FloatArray) -> FloatArray:
        """``crossing(t)`` for every ``t`` of ``makespans`` at once."""
        slope = self.step_s / self.per_token_s
        budget = makespans / self.per_token_s
        fill = max(0.0, (self.capacity - self.prompt_head) / self.slots)
        b = self.prompt_head - self.slots / 2.0 + slope
        n = _filling_root(b, self.slots, budget)
        past = (budget - self.ramp(fill) + self.capacity * fill) / (self.capacity + slope)
        out: FloatArray = np.maximum(0.0, np.where(n > fill, past, n))
        return out

    def serves_many(self, steps: FloatArray, makespan_s: float, rate: float) -> FloatArray:
        """The most ``K + rate * P_w`` a worker of this kind serves by ``makespan_s`` while running at
        least ``steps[i]`` steps, for every element (the module doc's formula, vectorised)."""
        return AtLengths(self, steps).serves(makespan_s, rate)

    def serves_grid(self, steps: FloatArray, makespans: FloatArray, rate: float) -> FloatArray:
        """``serves_many`` for every makespan (rows) at once: a family's speed groups are this kind
        with the makespan divided by their relative time scale."""
        return AtLengths(self, steps).serves_grid(makespans, rate)

    def _ramps(self, steps: FloatArray | float) -> FloatArray:
        """``ramp`` for every element of ``steps``."""
        fill = max(0.0, (self.capacity - self.prompt_head) / self.slots)
        short = np.minimum(steps, fill)
        out: FloatArray = np.where(
            steps <= fill,
            short * self.prompt_head + self.slots * short * (short - 1.0) / 2.0,
            self.ramp(fill) + self.capacity * (np.asarray(steps) - fill),
        )
        return out


def _filling_root(b: float | FloatArray, slots: int, budget: float | FloatArray) -> FloatArray:
    """The positive root of ``S/2 N^2 + b N - budget = 0``, stable where ``b`` (``c / m``) is huge:
    ``(sqrt(b^2 + 2 S budget) - b) / S`` had N to 1e-6 steps where the steps were 5 (edge49)."""
    b, budget = np.asarray(b, dtype=np.float64), np.asarray(budget, dtype=np.float64)
    root = np.sqrt(b * b + 2.0 * slots * budget)
    with np.errstate(divide="ignore", invalid="ignore"):
        stable = 2.0 * budget / (b + root)
    out: FloatArray = np.where(b > 0.0, stable, (root - b) / slots)
    return out


def kind_limits(cost: WorkerCost, prompts: FloatArray, descending: bool = False) -> KindLimits:
    """The limits of ``cost``'s kind for a batch with these prompt lengths (already sorted largest
    first where ``descending``: a bound asks for every kind and family, and sorted once)."""
    ordered = prompts if descending else np.sort(prompts)[::-1]
    head = float(ordered[: cost.max_num_seqs].sum())
    return KindLimits(
        step_s=cost.time_scale * (cost.mem_base_s + cost.overhead_s),
        per_token_s=cost.time_scale * cost.mem_per_token_s,
        prefill_s=cost.time_scale * cost.prefill_per_token_s,
        capacity=float(cost.kv_capacity_tokens),
        slots=cost.max_num_seqs,
        prompt_head=head,
    )


class AtLengths:
    """``KindLimits.serves_many`` (or ``serves_grid``) at one fixed array of lengths, probe after probe.

    The fluid searches of one bound ask each family's capacity at the same lengths (the batch's
    distinct lengths, or a speed-grouped family's knots) at 10-15 makespans and a few exchange rates;
    the ramp at each length and each length's weight reads (``c * N``) do not depend on either, so
    they are computed once here, and the crossing of U and A (one makespan) in plain floats rather
    than numpy scalars. Every value is the same arithmetic on the same operands as ``serves_many``'s
    and ``serves_grid``'s, so the same floats (tests/scheduler/test_kindlimits_cached.py)."""

    def __init__(self, limits: KindLimits, steps: FloatArray) -> None:
        self.limits, self.steps = limits, steps
        self.ramps = limits._ramps(steps)  # U at every length
        self.spent = limits.step_s * steps  # c * N at every length

    def serves(self, makespan_s: float, rate: float) -> FloatArray:
        """``KindLimits.serves_many(steps, makespan_s, rate)``."""
        crossing = self.limits.crossing(makespan_s)
        return self._serves(makespan_s, crossing, self.limits.ramp(crossing), rate)

    def serves_grid(self, makespans: FloatArray, rate: float) -> FloatArray:
        """``KindLimits.serves_grid(steps, makespans, rate)``: a row per makespan."""
        column = makespans[:, None]
        crossing = self.limits._crossings(column)
        return self._serves(column, crossing, self.limits._ramps(crossing), rate)

    def _serves(
        self,
        makespan_s: float | FloatArray,
        crossing_n: float | FloatArray,
        ramp_n: float | FloatArray,
        rate: float,
    ) -> FloatArray:
        """The capacity formula, given where U meets A (``KindLimits.crossing``), where the value is
        U's (``ramp_n``): A there is ``T / m - c * N / m``, which floats lose when ``m`` is tiny next
        to ``c`` (a capacity of 3 where 21 fit: a bound above a schedule, edge49)."""
        lim = self.limits
        alpha = rate * lim.per_token_s / lim.prefill_s
        chain = (makespan_s - self.spent) / lim.per_token_s
        at_steps = alpha * chain + (1.0 - alpha) * np.minimum(self.ramps, chain)
        at_crossing = np.where(crossing_n > self.steps, ramp_n, 0.0)
        out: FloatArray = np.maximum(0.0, np.maximum(at_steps, at_crossing))
        return out

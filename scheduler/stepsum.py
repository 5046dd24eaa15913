"""Closed-form sums of decode-step times over a run of steps with a fixed batch.

Between two events (an admission, a completion, a preemption) a continuous-batching engine runs the
same ``b`` sequences, and the KV context it reads grows by ``b`` tokens per step. The cost model's
step time is ``time_scale * (max(mem(C), compute(b, C)) + overhead)`` with both terms affine in ``C``,
so the sum over ``n`` steps is two arithmetic series split where the two lines cross. That turns a
per-step loop (tens of thousands of steps per worker) into one call per event, which is what makes
finish-time prediction and the lower bound cheap enough to run inside the planner.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from scheduler.costmodel import WorkerCost

FloatArray = npt.NDArray[np.float64]


def _series(a: float, s: float, start: int, stop: int) -> float:
    """Sum of ``a + s * k`` for integer ``k`` in ``[start, stop)``."""
    n = stop - start
    if n <= 0:
        return 0.0
    return n * a + s * (start + stop - 1) * n / 2.0


def decode_time(cost: WorkerCost, batch: int, context: float, steps: int) -> float:
    """Seconds for ``steps`` decode steps of ``batch`` sequences starting at ``context`` cached tokens.

    Step ``k`` reads ``context + batch * k`` tokens: each running sequence appends one token per step.
    """
    if steps <= 0:
        return 0.0
    grow = float(batch)
    mem_a = cost.mem_base_s + cost.mem_per_token_s * context
    mem_s = cost.mem_per_token_s * grow
    cmp_a = cost.flops_per_seq_s * batch + cost.flops_per_token_s * context
    cmp_s = cost.flops_per_token_s * grow
    diff_a, diff_s = mem_a - cmp_a, mem_s - cmp_s
    end = diff_a + diff_s * (steps - 1)
    if diff_a >= 0 and end >= 0:
        total = _series(mem_a, mem_s, 0, steps)
    elif diff_a <= 0 and end <= 0:
        total = _series(cmp_a, cmp_s, 0, steps)
    else:
        # The dominant term switches once, at the first k where the sign of diff flips.
        cross = min(steps, max(0, math.ceil(-diff_a / diff_s)))
        first, second = ((mem_a, mem_s), (cmp_a, cmp_s)) if diff_a > 0 else ((cmp_a, cmp_s), (mem_a, mem_s))
        total = _series(*first, 0, cross) + _series(*second, cross, steps)
    return cost.time_scale * (total + cost.overhead_s * steps)


def _held_series(c: float, b: float, a: float, s: float, start: int, stop: int) -> float:
    """Sum of ``(c + b * k) * (a + s * k)`` for integer ``k`` in ``[start, stop)``."""
    n = stop - start
    if n <= 0:
        return 0.0
    k1 = (start + stop - 1) * n / 2.0  # sum of k
    k2 = ((stop - 1) * stop * (2 * stop - 1) - (start - 1) * start * (2 * start - 1)) / 6.0  # of k^2
    return n * c * a + (c * s + b * a) * k1 + b * s * k2


def held_time(cost: WorkerCost, batch: int, context: float, steps: int) -> float:
    """KV-token-seconds held over ``decode_time(cost, batch, context, steps)``: each step's context
    (``context + batch * k`` tokens) times that step's time, summed in closed form. Over a play it
    is what a worker's cache really held, the replay's ``KV use``, which a count of each sequence's
    mean context over its span (evictions and waits included) put above 1 on KV-bound batches.
    """
    if steps <= 0:
        return 0.0
    grow = float(batch)
    mem_a = cost.mem_base_s + cost.mem_per_token_s * context
    mem_s = cost.mem_per_token_s * grow
    cmp_a = cost.flops_per_seq_s * batch + cost.flops_per_token_s * context
    cmp_s = cost.flops_per_token_s * grow
    diff_a, diff_s = mem_a - cmp_a, mem_s - cmp_s
    end = diff_a + diff_s * (steps - 1)
    if diff_a >= 0 and end >= 0:
        total = _held_series(context, grow, mem_a, mem_s, 0, steps)
    elif diff_a <= 0 and end <= 0:
        total = _held_series(context, grow, cmp_a, cmp_s, 0, steps)
    else:  # the leading term switches once, where ``decode_time`` splits
        cross = min(steps, max(0, math.ceil(-diff_a / diff_s)))
        first, second = ((mem_a, mem_s), (cmp_a, cmp_s)) if diff_a > 0 else ((cmp_a, cmp_s), (mem_a, mem_s))
        head = _held_series(context, grow, *first, 0, cross)
        total = head + _held_series(context, grow, *second, cross, steps)
    overhead = cost.overhead_s * (steps * context + grow * (steps - 1) * steps / 2.0)
    return cost.time_scale * (total + overhead)


def _series_v(a: FloatArray, s: float, start: FloatArray, stop: FloatArray) -> FloatArray:
    """``_series`` over arrays of ``a``, ``start`` and ``stop``: one decode sum per trajectory at once."""
    n = np.maximum(stop - start, 0.0)
    return n * a + s * (start + stop - 1.0) * n / 2.0


def solo_decode_times(cost: WorkerCost, prompts: FloatArray, outputs: FloatArray) -> FloatArray:
    """Vectorised ``decode_time(cost, 1, p, L)`` for many (prompt, output) pairs: a sequence alone."""
    mem_a = cost.mem_base_s + cost.mem_per_token_s * prompts
    cmp_a = cost.flops_per_seq_s + cost.flops_per_token_s * prompts
    mem_s, cmp_s = cost.mem_per_token_s, cost.flops_per_token_s
    diff_a, diff_s = mem_a - cmp_a, mem_s - cmp_s
    if diff_s == 0.0:
        cross = np.where(diff_a >= 0, outputs, 0.0)
    else:
        cross = np.clip(np.ceil(-diff_a / diff_s), 0.0, outputs)
        # Where memory dominates at k=0 and the gap only widens (or vice versa), nothing crosses.
        cross = np.where((diff_a >= 0) & (diff_s >= 0), outputs, cross)
        cross = np.where((diff_a < 0) & (diff_s <= 0), 0.0, cross)
    zero = np.zeros_like(outputs)
    mem_first = diff_a >= 0
    head = np.where(mem_first, _series_v(mem_a, mem_s, zero, cross), _series_v(cmp_a, cmp_s, zero, cross))
    tail = np.where(
        mem_first, _series_v(cmp_a, cmp_s, cross, outputs), _series_v(mem_a, mem_s, cross, outputs)
    )
    return cost.time_scale * (head + tail + cost.overhead_s * outputs)


def planned_steps(predicted_tokens: float) -> int:
    """Decode steps the planner assumes for a predicted length: whole tokens, at least one."""
    return max(1, math.ceil(predicted_tokens))


def planned_steps_array(predicted_tokens: Sequence[float] | FloatArray) -> npt.NDArray[np.int64]:
    """``planned_steps`` of many predictions at once (the same integers: ceil of a finite float)."""
    values = np.asarray(predicted_tokens, dtype=np.float64)
    return np.maximum(np.ceil(values), 1.0).astype(np.int64)


def decode_times(cost: WorkerCost, batch: FloatArray, context: FloatArray, steps: FloatArray) -> FloatArray:
    """Vectorised ``decode_time``: one run of steps per element, same formula and evaluation order."""
    mem_a = cost.mem_base_s + cost.mem_per_token_s * context
    mem_s = cost.mem_per_token_s * batch
    cmp_a = cost.flops_per_seq_s * batch + cost.flops_per_token_s * context
    cmp_s = cost.flops_per_token_s * batch
    diff_a, diff_s = mem_a - cmp_a, mem_s - cmp_s
    end = diff_a + diff_s * (steps - 1)
    memory = (diff_a >= 0) & (end >= 0)
    compute = ~memory & (diff_a <= 0) & (end <= 0)
    safe = np.where(diff_s == 0, 1.0, diff_s)
    cross = np.minimum(steps, np.maximum(0.0, np.ceil(-diff_a / safe)))
    mem_first = _split(mem_a, mem_s, cmp_a, cmp_s, cross, steps)
    cmp_first = _split(cmp_a, cmp_s, mem_a, mem_s, cross, steps)
    total = np.where(
        memory,
        _whole(mem_a, mem_s, steps),
        np.where(compute, _whole(cmp_a, cmp_s, steps), np.where(diff_a > 0, mem_first, cmp_first)),
    )
    return cost.time_scale * (total + cost.overhead_s * steps)


def _whole(a: FloatArray, s: FloatArray, n: FloatArray) -> FloatArray:
    """``_series(a, s, 0, n)`` elementwise, in the same evaluation order."""
    return n * a + s * (0 + n - 1) * n / 2.0


def _split(
    a1: FloatArray, s1: FloatArray, a2: FloatArray, s2: FloatArray, cross: FloatArray, n: FloatArray
) -> FloatArray:
    """First line up to ``cross``, the second after it (``_series`` twice, elementwise)."""
    head = np.maximum(cross, 0.0)
    tail = np.maximum(n - cross, 0.0)
    return (head * a1 + s1 * (0 + cross - 1) * head / 2.0) + (tail * a2 + s2 * (cross + n - 1) * tail / 2.0)

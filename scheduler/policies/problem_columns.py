"""The per-trajectory columns a plan's ``Problem`` is built from: prompts, planned steps, the KV cache
each needs, its KV-token-steps, as tuples to read by index and arrays to rank, and the lower bound's
view of the same arrays.

Why apart from ``scheduler.policies.problem``. These are figures of each trajectory alone, computed
at once with numpy; the problem module turns them into units (a trajectory or a group), the workers
each may take, and the memos every policy reads. Here is also where a batch's products must not
wrap (``kv_steps``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from scheduler import batch_columns
from scheduler.batch_columns import BatchColumns
from scheduler.stepsum import planned_steps_array
from scheduler.types import PlanRequest

INT64_LIMIT = 2**63  # numpy's int64 products wrap silently at this (``kv_steps``)


class Columns(NamedTuple):
    """Per-trajectory figures, as tuples for reading by index and as arrays for ranking."""

    prompts: tuple[int, ...]  # prompt tokens
    steps: tuple[int, ...]  # planned decode steps
    need: list[int]  # prompt plus generation cap: the KV cache a worker needs to take it
    kv_steps: list[float]  # KV-token-steps, p*L + L*(L-1)/2
    step_array: npt.NDArray[np.int64]
    kv_array: npt.NDArray[np.float64]
    bound: BatchColumns  # the lower bound's view of the same columns


def trajectory_columns(request: PlanRequest) -> Columns:
    """Every trajectory's figures (``Columns``) at once, with numpy: ``O(n)`` at 32k trajectories."""
    trajectories = request.trajectories
    prompt_array = np.array([t.prompt_tokens for t in trajectories], dtype=np.int64)
    step_array = planned_steps_array([t.predicted_tokens for t in trajectories])
    caps = np.array([t.max_new_tokens for t in trajectories], dtype=np.int64)
    need = (prompt_array + caps).tolist()
    kv_array = kv_steps(prompt_array, step_array)
    prompts, steps = tuple(prompt_array.tolist()), tuple(step_array.tolist())
    bound = batch_columns.from_arrays(prompt_array, step_array, caps)
    return Columns(prompts, steps, need, kv_array.tolist(), step_array, kv_array, bound)


def kv_steps(prompts: npt.NDArray[np.int64], steps: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """``p*L + L*(L-1)/2`` per trajectory as Python evaluates it on ints: both products exact, then
    one float addition. On int64 arrays where no product can pass 2**63 (every real batch); past
    that, on Python's ints: validation accepts caches of ~2e11 tokens (64 GPUs of 1e5 GiB), and a
    prompt of half that with a 2**31-token cap wrapped ``p*L`` to -5.9e18 KV-token-steps, a negative
    load that every estimate then believed and that CP-SAT's repair rejected as MODEL_INVALID."""
    longest, widest = int(steps.max(initial=0)), int(prompts.max(initial=0))
    if max(longest, widest) * longest < INT64_LIMIT:
        return (prompts * steps).astype(np.float64) + (steps * (steps - 1)).astype(np.float64) / 2.0
    exact = [p * n + n * (n - 1) / 2 for p, n in zip(prompts.tolist(), steps.tolist(), strict=True)]
    return np.array(exact, dtype=np.float64)

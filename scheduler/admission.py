"""KV admission by projected peak: admit a trajectory only if the cache never overflows on the plan.

Why not reserve each sequence's final length. Reserving ``prompt + predicted output`` for every
running sequence at once counts each at its largest size for its whole life, but a sequence's KV
grows one token per step from its prompt: on long chain-of-thought batches the sum of final sizes
is about twice what the cache ever holds, so reservation keeps the cache half empty. What must hold
instead is that the KV of the running set, each sequence growing until its predicted end, never
exceeds the cache at any future step. That is a peak over a handful of points, not a sum:

    held(t) = sum over running i with remaining_i > t of (context_i + t + 1)

is what the batch holds after its decode step ``t`` (``t = 0`` is the next step; a step writes one
token per sequence, which is the engine's preemption test ``context + batch <= capacity``). Between
completions ``held`` only grows, so its maximum is at ``t = remaining_i - 1`` for some ``i``.

On exact lengths an engine that admits by this test never preempts, and it keeps the cache as full
as that allows. On predicted lengths a sequence that outlives its prediction is counted as ending
at its next step (``remaining`` at least 1): the engine's preemption remains the safety net.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def projected_peak(contexts: Sequence[int], remaining: Sequence[int]) -> int:
    """The most KV tokens the running sequences will hold at once if each runs ``remaining`` more steps.

    ``contexts[i]``: tokens sequence ``i`` holds now (prompt plus output so far); ``remaining[i]``:
    decode steps it still runs (values below 1 count as 1: it is running, so it takes a step).
    """
    if len(contexts) == 0:
        return 0
    c = np.asarray(contexts, dtype=np.int64)
    r = np.maximum(np.asarray(remaining, dtype=np.int64), 1)
    order = np.argsort(r, kind="stable")
    r, c = r[order], c[order]
    held_from = np.cumsum(c[::-1])[::-1]  # contexts of the sequences still running at r[k] - 1
    running = len(c) - np.arange(len(c))
    return int((held_from + running * r).max())


def peak_fits(
    contexts: Sequence[int], remaining: Sequence[int], prompt: int, steps: int, capacity: int
) -> bool:
    """Whether a new sequence of ``prompt`` tokens running ``steps`` steps keeps the projected peak
    within ``capacity``, beside the running ones (see ``projected_peak``)."""
    return projected_peak([*contexts, prompt], [*remaining, steps]) <= capacity

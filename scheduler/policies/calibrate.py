"""How cpsat's band rounds read what they measured: per-worker slowdowns for the second round, and
one cost standing for each device kind in the band model.

Why a module of its own: both are arithmetic on a plan's estimates and simulated finishes, apart
from the search that decides when rounds run (``scheduler.policies.cpsat``, which calls them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from scheduler.costmodel import WorkerCost
from scheduler.policies.load import load_of, time_with
from scheduler.policies.problem import Problem


def calibrate(
    problem: Problem,
    assignment: Sequence[Sequence[int]],
    finishes: Sequence[float],
    tiers: Sequence[int],
    kinds: Sequence[Sequence[int]],
) -> tuple[list[float], float]:
    """Per worker, the worst simulated over estimated finish of its (kind, band) group (at least
    1); and the highest estimate (the second round's cap reads it).

    The estimate misses what only the worker model sees (KV peaks and preemption, admission
    waves); the second round plans each group as that much slower, so a group found slow is not
    overloaded again.
    """
    slowdown = [[1.0] * (max(tiers, default=0) + 1) for _ in kinds]
    highest = 0.0
    for k, members in enumerate(kinds):
        for w in members:
            if not assignment[w]:
                continue
            estimate = time_with(problem.costs[w], load_of(problem, assignment[w]))
            highest = max(highest, estimate)
            if estimate > 0:
                slowdown[k][tiers[w]] = max(slowdown[k][tiers[w]], finishes[w] / estimate)
    kind_of = {w: k for k, members in enumerate(kinds) for w in members}
    scale = [slowdown[kind_of[w]][tiers[w]] if w in kind_of else 1.0 for w in range(len(finishes))]
    return scale, highest


def representative(costs: Sequence[WorkerCost], members: Sequence[int]) -> WorkerCost:
    """One cost standing for a kind in the band model: its first member's, at the kind's harmonic
    mean scale (the pool's decode rate is the sum of each member's, which goes as one over its
    scale), so a kind of near-identical workers offers the model what its members offer together.
    Exactly the first member's cost when every member has the same scale."""
    first = costs[members[0]]
    scales = [costs[w].time_scale for w in members]
    if all(s == first.time_scale for s in scales):
        return first
    return dataclasses.replace(first, time_scale=len(scales) / sum(1.0 / s for s in scales))

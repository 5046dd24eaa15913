"""How cpsat's band rounds read what they measured: per-worker slowdowns for the second round, and
one cost standing for each device kind in the band model.

Why a module of its own: both are arithmetic on a plan's estimates and simulated finishes, apart
from the search that decides when rounds run (``scheduler.policies.bandsearch``, which calls them).
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


def in_waves(
    problem: Problem,
    assignment: Sequence[Sequence[int]],
    scale: Sequence[float],
    tiers: Sequence[int],
    kinds: Sequence[Sequence[int]],
) -> list[float]:
    """Per worker, the scale its estimates take once it holds more trajectories than its slots in the
    next round: its own (``calibrate``'s ``scale``) where its (kind, band) group ran in waves in the
    round read, else the larger of its own and the worst of its kind's groups that did.

    Why. ``calibrate`` reads a group that ran at once as on time (its closed form is exact there), but
    the next round may take it past its slots: the units its cap sets aside go last to the workers
    with the lowest estimates, the at-once ones, and there they run in waves, which its estimate does
    not see. 4,096 x 32 seed 7: round 1's two Ascends at 8,190 steps ran 251 units at once (1.008x
    their estimates); round 2 gave them 321-323, played 1.103x, and the round ended at 409.5 s
    against 394.9 s, every other worker at 392.5-392.7 s (docs/experiments.md, Solver, 2026-12-05
    "solver4k"). Planned at their kind's waves slowdown once past their slots, they stop where the
    waves workers it was measured on do."""
    kind_of = {w: k for k, members in enumerate(kinds) for w in members}
    waves = {
        (kind_of[w], tiers[w])
        for w in kind_of
        if _trajectories(problem, assignment[w]) > problem.costs[w].max_num_seqs
    }
    worst = [1.0] * len(kinds)
    for w, k in kind_of.items():
        if (k, tiers[w]) in waves:
            worst[k] = max(worst[k], scale[w])
    return [
        s if w not in kind_of or (kind_of[w], tiers[w]) in waves else max(s, worst[kind_of[w]])
        for w, s in enumerate(scale)
    ]


def _trajectories(problem: Problem, units: Sequence[int]) -> int:
    """How many sequences ``units`` (unit indices) hold: what an engine's slots count."""
    return sum(len(problem.units[u].members) for u in units)


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

"""Fewer workers at the band model's lowest band than it chose: what the lowest band cannot realise.

Why. The band model (``scheduler.policies.levels``) credits a worker at band ``j`` with what a cache
kept ``KV_FILL`` full serves by the makespan, whatever the band's edge. Above the middle bands that
credit is the step chain's limit (``(T - c * x_j) / m``), and the realised plan meets it. At the
lowest bands it is not: a worker there serves that much only by running more steps than its longest
unit, in waves, and waves of short units simulate 12-30% over their estimate; a worker there that
runs its queue at once is held by its at-once KV peak (its slots' contexts fill the cache early and
no later unit fits) to ``at_once_kv`` of its edge, well under the credit, and ends early. The model
then leaves that work to the tall workers, which end over its makespan. Making the credit itself
truthful moved every count instead (a waves credit of 0.7-0.97 of the full rate, the at-once term,
the groups' capacity as round 1 realised it: medians 1.0270-1.0862 at 4,096 x 32, none below the
1.0270 of the model's own counts), while one worker per ``PER_WORKERS`` moved from the lowest band
up to the first band whose at-once capacity covers the model's credit there realised a better plan
on every bench batch of 4,096 x 32 (median 1.0229) and no worse on any of 16,384 x 128
(docs/experiments.md, Solver, 2026-12-05 "solverband").

The same counts keep the fastest kind out of the others' bands (``above_others``): a fast worker at
a slower kind's top band takes the short units past its slots (docs/solver.md, step 3).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from scheduler.costmodel import WorkerCost
from scheduler.policies.calibrate import representative
from scheduler.policies.levels import KV_UNIT, LevelPlan, band_capacity
from scheduler.policies.load import KV_FILL
from scheduler.policies.problem import Problem

PER_WORKERS = 32  # one worker moved per this many in the pool (none below it). Bench medians,
# frozen clock, 16,384 x 128 by workers moved: 1: 1.0332, 2: 1.0340, 3: 1.0332, 4: 1.0317, 6:
# 1.0330, 8: 1.0332 (none: 1.0332); 4,096 x 32: 1: 1.0229, 2: 1.0259 (none: 1.0270); 1,024 x 16,
# one: two of five batches later (1.0197 -> 1.0230, 1.0131 -> 1.0157)
ALIKE = 0.06  # above_others only where each kind's scales lie within this of its fastest's (``alike``).
# Frozen clock, the rule forced on against off, scales drawn in [1 - s, 1 + s] (a kind's slowest over
# its fastest, at 128 workers, about (1 + s) / (1 - s)): at 1.05-1.06 it still made 16,384 x 128 earlier
# in median (1.0345 -> 1.0331, 1.0350 -> 1.0342, 1.0351 -> 1.0339) and 32,768 x 256 on 10 of 10; from
# about 1.07 most 16,384 x 128 batches and 4,096 x 32's one were later (docs/experiments.md, Solver,
# 2026-12-05 "alike")


def at_once_kv(cost: WorkerCost, steps: int, prompt_tokens: float) -> float:
    """KV-token-steps a worker serves over ``steps`` steps running its whole queue at once, at most:
    its slots full of units with ``prompt_tokens`` of prompt until their contexts fill the cache,
    the cache full after that (units ending as the contexts grow, so that it never overflows)."""
    cache, slots = cost.kv_capacity_tokens, cost.max_num_seqs
    knee = max(0.0, min(float(steps), cache / slots - prompt_tokens))  # steps until the slots fill it
    return slots * (prompt_tokens * knee + knee * knee / 2.0) + cache * (steps - knee)


def low_shifted(levels: LevelPlan, problem: Problem, kinds: Sequence[Sequence[int]]) -> LevelPlan:
    """``shifted`` for ``problem``'s pool (``kinds``: each kind's members, in the counts' order, each
    kind standing as the band model saw it) and its batch's mean prompt, then ``above_others`` where
    every kind's speeds are ``alike``."""
    costs = [representative(problem.costs, members) for members in kinds]
    prompt_tokens = sum(problem.prompts) / max(1, len(problem.prompts))
    moved = shifted(levels, costs, prompt_tokens, sum(len(members) for members in kinds))
    return above_others(moved) if alike(problem.costs, kinds) else moved


def alike(costs: Sequence[WorkerCost], kinds: Sequence[Sequence[int]]) -> bool:
    """Whether every kind's slowest member's ``time_scale`` is within ``ALIKE`` of its fastest's.

    Why: ``above_others`` was found and kept on pools of equal speeds. With learned speeds the tiers
    put a kind's slowest members at its lowest bands, so the workers it would move are the top
    kind's slowest, beside the other kind's fastest; there they stayed under their slots (16,384 x
    128 seed 5 at scales in [0.9, 1.1]: two H100s, 160 units each on 256 slots) and moving them
    made 10 of 11 bench batches later (median 1.0363 -> 1.0378; at [0.95, 1.05] 9 of 10, 1.0336 ->
    1.0347), while at [0.98, 1.02] it still made 10 of 11 earlier (1.0362 -> 1.0335), as with equal
    speeds (docs/experiments.md, Solver, 2026-12-05 "spreadcheck"). Between the two the gain shrinks
    with the spread; it is still a gain, at every size, while the slowest lie within 6% (``ALIKE``,
    2026-12-05 "alike")."""
    for members in kinds:
        scales = [costs[w].time_scale for w in members]
        if scales and max(scales) > (1.0 + ALIKE) * min(scales):
            return False
    return True


def above_others(levels: LevelPlan) -> LevelPlan:
    """``levels`` with every worker of the kind that holds the top band, where it sits at or below a
    band in which the other kinds outnumber it, moved up to its own kind's lowest band above all of
    theirs.

    Why: such a worker is the fast one among slower workers of its band, so each unit costs it the
    least there, and list scheduling hands it the short units until it passes its slots and runs its
    long ones in waves (16,384 x 128 seed 3: an H100 among 11 Ascends at their top band, 16,384
    steps, took 316 units on 256 slots and played 1.06x its estimate, the round at 1.09x the bound).
    A band where the others are no more than it (a lone Ascend above its kind's other bands, or one
    beside an H100) is not that, and moving the H100s at or below it hurt: 4,096 x 32 seed 13 (four
    H100s under one Ascend) 1.0281 -> 1.0346, seed 10 1.0258 -> 1.0277 (docs/experiments.md, Solver,
    2026-12-05 "solver16k2"). Unchanged where no such band holds or lies above one of its workers,
    or the kind has no band above the others'."""
    top = max(range(len(levels.counts)), key=lambda k: max(_occupied(levels.counts[k]), default=-1))
    row = list(levels.counts[top])
    others = [sum(column) - row[j] for j, column in enumerate(zip(*levels.counts, strict=True))]
    among = max((j for j, n in enumerate(others) if n > row[j]), default=-1)  # the highest such band
    to = next((j for j in _occupied(row) if j > max(_occupied(others), default=len(row))), None)
    if to is None or not any(row[: among + 1]):
        return levels
    row[to] += sum(row[: among + 1])
    row[: among + 1] = [0] * (among + 1)
    counts = tuple(tuple(row) if k == top else r for k, r in enumerate(levels.counts))
    return dataclasses.replace(levels, counts=counts)


def _occupied(row: Sequence[int]) -> list[int]:
    """The bands ``row`` has a worker in, lowest first."""
    return [j for j, n in enumerate(row) if n]


def shifted(levels: LevelPlan, kinds: Sequence[WorkerCost], prompt_tokens: float, workers: int) -> LevelPlan:
    """``levels`` with ``workers // PER_WORKERS`` workers moved, one at a time, from the lowest band
    any kind occupies (of the kind with the most workers there) up to the first band above it whose
    ``at_once_kv`` covers the model's credit at its makespan; ``kinds``: one cost per kind, in the
    counts' order; ``prompt_tokens``: the batch's mean prompt. Makespan and status stay the model's
    (the rounds read them as its estimate). Unchanged where no band above covers its credit."""
    counts = [list(row) for row in levels.counts]
    for _ in range(workers // PER_WORKERS):
        low = min((j for row in counts for j, n in enumerate(row) if n), default=None)
        if low is None:
            break
        kind = max(range(len(counts)), key=lambda k: counts[k][low])  # the first such kind on ties
        cost = kinds[kind]
        to = next(
            (
                j
                for j in range(low + 1, len(levels.edges))
                if at_once_kv(cost, levels.edges[j], prompt_tokens)
                >= band_capacity(cost, levels.edges[j], levels.makespan_s, KV_FILL) * KV_UNIT
            ),
            None,
        )
        if to is None:
            break
        counts[kind][low] -= 1
        counts[kind][to] += 1
    return dataclasses.replace(levels, counts=tuple(tuple(row) for row in counts))

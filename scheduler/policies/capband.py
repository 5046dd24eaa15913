"""Under prefix affinity, more workers of the fastest kind in the cap band than the band model chose.

The band model credits the cap band (the units that reach the generation cap) with fluid work, but
under affinity those units are whole groups of capped samples, and the few fastest-kind workers the
model puts there cannot share them evenly: plans end 9-11% over the bound while the model's own
makespan sits on it. Realising the same solve again with more of that kind's workers in the cap band
spreads the groups (docs/solver.md, step 4; docs/experiments.md, 2026-12-03 "affq"). Pure: cpsat's
rounds call it and judge the result like any other realisation.
"""

from __future__ import annotations

import dataclasses

from scheduler.policies.levels import LevelPlan

CAP_SHIFTS = 3  # under prefix affinity, more realisations of the same solve, call k with k steps more
# workers of the cap band's kind in the cap band (``bandsearch.cap_band_rounds``, ``cap_shifted``)
CAP_STEP = 0.1  # a step: this share of that kind's cap-band count, at least one worker
CAP_LEFT = 0.3  # a shifted call starts only while this share of the budget is left. Bench batches
# with affinity, over the bound: 4,096 x 32 (0.25 s) 1.089-1.109 -> 1.060-1.089; 16,384 x 128 (1 s)
# 1.107-1.115 -> 1.080-1.097 where the shifts started (walls up to 967 ms; docs/experiments.md)


def cap_shifted(levels: LevelPlan, shift: int) -> LevelPlan:
    """``levels`` with ``shift`` steps (``CAP_STEP`` of its cap-band count, at least one worker)
    more workers of the kind with the most workers in the cap band at the cap band, taken from that
    kind's lowest bands first (the module docstring says why). Its makespan and status stay the
    model's: the rounds read them as the model's estimate, which a shift does not change."""
    top = len(levels.edges) - 1
    counts = [list(row) for row in levels.counts]
    kind = max(range(len(counts)), key=lambda k: counts[k][top])  # the first such kind on ties
    to_move = shift * max(1, round(CAP_STEP * counts[kind][top]))
    for band in range(top):
        moved = min(to_move, counts[kind][band])
        counts[kind][band] -= moved
        counts[kind][top] += moved
        to_move -= moved
    return dataclasses.replace(levels, counts=tuple(tuple(row) for row in counts))

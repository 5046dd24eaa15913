"""The band cover of limit (d): whole trajectories, which the fluid cover lets workers share.

``scheduler.tailcover`` lets the demand of one trajectory spill over two workers. Where a few long
trajectories decide the makespan that is not what a schedule can do: three 32k-token trajectories on
two workers put two on one of them. This model keeps that integrality, at band granularity: workers
are counted per length band exactly as in planning (``scheduler.policies.levels``: nested cover,
Hall's condition), and a worker at band ``k`` holds at most ``floor(capacity / smallest unit of bands
>= j)`` of the units of bands ``>= j``. Capacities round up and demands down, a worker at band ``j``
is credited with the band's shortest length, and a CP-SAT probe that runs out of its deterministic
limit counts as feasible, so the model only ever proves what every schedule obeys.

It is probed once above the fluid bound (``scheduler.tailbound``), where the greedy cover settles it
without a solve unless whole trajectories bind.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from ortools.sat.python import cp_model

from scheduler import giveup
from scheduler.policies.bandcover import ItemCounts, cover
from scheduler.policies.levels import KV_UNIT, IntArray, band_edges, band_loads
from scheduler.stepsum import FloatArray

if TYPE_CHECKING:
    from scheduler.kindlimits import KindLimits

BOUND_BANDS = 10  # quantile bands; ``grid`` adds uniform ones (finer: tighter, and slower to prove)


class BandCover:
    """The band cover of one prefill exchange rate, probed at one makespan at a time."""

    def __init__(
        self,
        lengths: IntArray,
        demand_steps: FloatArray,
        limits: Sequence[tuple[KindLimits, int]],
        rate: float,
        grid: int,
    ) -> None:
        self.edges = band_edges(lengths, BOUND_BANDS, grid)
        self.demand = [math.floor(k / KV_UNIT) for k in band_loads(lengths, demand_steps, self.edges)]
        self.needed, self.smallest, self.shortest = _band_items(lengths, demand_steps, self.edges)
        self.limits, self.rate = limits, rate
        self.sizes = [n for _, n in limits]

    def infeasible(self, makespan_s: float) -> bool:
        """Whether CP-SAT proves that no band cover exists by ``makespan_s``. The caller's hard
        deadline is checked first (``scheduler.giveup``): a probe asks two covers, ~10 ms of CP-SAT
        each at 16,384 trajectories, and was checked only before the first (deadline48)."""
        giveup.check()
        shortest = np.asarray(self.shortest, dtype=np.float64)
        most: list[list[float]] = [
            lim.serves_many(shortest, makespan_s, self.rate).tolist() for lim, _ in self.limits
        ]
        units = [[math.ceil(v / KV_UNIT) for v in row] for row in most]
        bands = range(len(self.edges))
        room = tuple(
            tuple(tuple(_whole(row[k], self.smallest[j]) if k >= j else 0 for j in bands) for k in bands)
            for row in most
        )
        status = cover(units, self.demand, self.sizes, None, 0, ItemCounts(self.needed, room))[1]
        return bool(status == cp_model.INFEASIBLE)


def _band_items(
    lengths: IntArray, demand_steps: FloatArray, edges: Sequence[int]
) -> tuple[tuple[int, ...], list[float], list[int]]:
    """Per band j: how many units lie in bands >= j, the smallest demand among them, and the
    shortest unit of band j itself (a worker at band j runs at least that many steps)."""
    bands = np.minimum(np.searchsorted(np.asarray(edges), lengths, side="left"), len(edges) - 1)
    needed, smallest, shortest = [], [], []
    previous = 0
    for j, edge in enumerate(edges):
        tail, own = demand_steps[bands >= j], lengths[bands == j]
        needed.append(int(tail.size))
        smallest.append(float(tail.min()) if tail.size else math.inf)
        shortest.append(int(own.min()) if own.size else previous + 1)
        previous = edge
    return tuple(needed), smallest, shortest


def _whole(serves: float, smallest: float) -> int:
    """How many units of at least ``smallest`` fit in ``serves`` (rounded up at the 1e-9 level:
    float error must never make the bound claim less room than there is)."""
    if smallest <= 0.0 or not math.isfinite(smallest):
        return 1 << 30
    return math.floor(serves / smallest * (1.0 + 1e-9))

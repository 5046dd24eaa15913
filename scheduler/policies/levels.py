"""The aggregate model behind ``cpsat``: how many workers of each kind run the long tail.

Why aggregate. A boolean per (trajectory, worker) does not load at rollout sizes (32k x 256 is eight
million booleans). But workers of one device kind are interchangeable, and what decides the makespan
of a continuous-batching worker is captured by two numbers (``scheduler.policies.load``): how many
decode steps it runs, ``N >= its longest trajectory``, and how many KV-token-steps ``K`` it serves:

    T >= c * N + m * K        (every step reads the weights once, and the cached context)
    T >= (c / kv_capacity + m) * K     (a step holds at most a full KV cache: N >= K / kv_capacity)

So a worker that hosts a 32k-token trajectory pays ``c * 32k`` however little else it runs, and every
extra long trajectory it hosts costs it only ``m * K``. List scheduling spreads the longest items one
per worker and makes *every* worker pay that price; the better plan often concentrates the tail on a
few workers and lets the rest run dense, KV-full batches of short items. That is a decision about
counts, not identities, and it is what this model makes:

- bands: units are cut by length at quantiles of their length (1/2, 3/4, ..., the cap band) and at
  every ``1/GRID`` of the longest; a worker is "at band j" when its longest unit lies in band j, and
  then runs at least ``x_j`` steps (the band's upper edge). The grid matters: with quantile bands
  alone the Ascends of a 4,096 x 32 batch all sat at one edge (16.7k steps) where the fluid cover
  steps them down from 15.7k to 3.5k, and plans ended 5.0% above the bound; with the grid, 3.5%;
- variables: ``n[c, j]``, the number of workers of kind ``c`` at band ``j``;
- for a fixed makespan ``T`` one such worker serves at most
  ``cap[c, j](T) = min((T - c_c x_j) / m_c, T / (c_c / kvcap_c + m_c))`` KV-token-steps (the two
  limits above), a constant; so the constraints are linear: each kind's workers are all somewhere,
  and the units of bands ``>= j`` fit on the workers at bands ``>= j`` (nested coverage, which is
  exactly when the KV of each band can be routed to workers allowed to take it: Hall's condition
  on nested sets);
- objective: the least ``T`` for which that model is feasible. Nested coverage with every unit at
  its band's edge is the fluid cover of ``scheduler.tailcover``, so a dynamic programme over worker
  counts decides each probe exactly (4-40 ms a solve where CP-SAT probes took 30-80 ms) and its
  best chain, walked back, gives the counts. Only where the programme would merge kinds (more than
  ``MAX_STATES`` count combinations: three or more large kinds) does CP-SAT decide the probes
  (``scheduler.policies.bandcover``).

``scheduler.policies.bandsearch`` turns the counts into a placement by list scheduling inside the chosen
bands.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from ortools.sat.python import cp_model

from scheduler import clock
from scheduler.costmodel import WorkerCost
from scheduler.policies.bandcover import cover
from scheduler.policies.load import KV_FILL
from scheduler.policies.problem import Unit
from scheduler.stepsum import FloatArray
from scheduler.tailcover import MAX_STATES, FluidCover, layout

IntArray = npt.NDArray[np.int64]

BANDS = 7  # quantile bands (incl. the cap band); more quantiles add little past the grid below
GRID = 64  # plus an edge every 1/GRID of the longest length. Medians at 4,096 x 32, one run each:
# 8: 1.044, 16: 1.035, 32: 1.032; finer adds tiers, each a heap the placement visits per unit. 16 -> 64
# (frozen clock, seeds 0-4, 1,024 x 16 / 4,096 x 32 / 16,384 x 128): 1.0171 / 1.0229 / 1.0288 ->
# 1.0088 / 1.0222 / 1.0266; seeds 5-14: 1.0185 / 1.0255 -> 1.0106 / 1.0233. Edges 2,048 steps
# apart made 2-4 workers of a kind share one longest length, each paying the weights read to it,
# where the fluid cover steps them down one by one (docs/experiments.md, helper stair65)
KV_UNIT = 1e7  # KV-token-steps per integer unit of K (coefficients keep ~3 significant digits)
PRECISION = 0.002  # bisection stops when the bracket on T is this tight (relative)


@dataclass(frozen=True, slots=True)
class LevelPlan:
    """How many workers of each kind sit at each band, and what the model expects of that."""

    edges: tuple[int, ...]  # band upper edges in decode steps, increasing; the last is the longest unit
    counts: tuple[tuple[int, ...], ...]  # counts[c][j]: workers of kind c at band j
    makespan_s: float  # the model's makespan (its estimate, not the simulator's)
    status: str  # OPTIMAL when the search on T closed its bracket, else FEASIBLE (CP-SAT's names)

    def tiers(self, kinds: Sequence[Sequence[int]], workers: int) -> list[int]:
        """Each worker's band: within a kind (``kinds``: its members' indexes), the first workers take
        the highest bands the model chose."""
        tiers = [0] * workers
        for k, members in enumerate(kinds):
            position = 0
            for band in reversed(range(len(self.edges))):
                for w in members[position : position + self.counts[k][band]]:
                    tiers[w] = band
                position += self.counts[k][band]
        return tiers


def band_edges(lengths: Sequence[int] | IntArray, bands: int = BANDS, grid: int = 0) -> tuple[int, ...]:
    """Band upper edges at length quantiles 1/2, 3/4, 7/8, ..., the longest length below the maximum
    (so trajectories truncated at the cap form a band of their own) and the maximum, plus per point
    ``k / grid`` of the maximum the longest length at or below it; deduplicated."""
    ordered = np.sort(np.asarray(lengths, dtype=np.int64))
    n = len(ordered)
    edges = {int(ordered[min(n - 1, math.ceil(n * (1.0 - 0.5**k)) - 1)]) for k in range(1, bands - 1)}
    below = int(np.searchsorted(ordered, ordered[-1], side="left"))
    if below > 0:
        edges.add(int(ordered[below - 1]))
    edges.add(int(ordered[-1]))
    for k in range(1, grid):
        below = int(np.searchsorted(ordered, int(ordered[-1]) * k // grid, side="right"))
        if below > 0:
            edges.add(int(ordered[below - 1]))
    return tuple(sorted(edges))


def band_loads(lengths: Sequence[int] | IntArray, kv_steps: Sequence[float] | FloatArray,
               edges: Sequence[int]) -> list[float]:  # fmt: skip
    """KV-token-steps per band (``band_of`` each length), summed in input order like a loop would."""
    bands = np.minimum(np.searchsorted(np.asarray(edges), np.asarray(lengths), side="left"), len(edges) - 1)
    weights = np.asarray(kv_steps, dtype=np.float64)
    return [float(x) for x in np.bincount(bands, weights=weights, minlength=len(edges))]


def bands_of(units: Sequence[Unit], edges: Sequence[int]) -> list[int]:
    """``band_of`` each unit's steps, by unit index, in one vectorised pass: a cpsat round reads
    each unit's band once, and a call per unit was ~6% of its placement."""
    steps = np.fromiter((unit.steps for unit in units), dtype=np.int64, count=len(units))
    found = np.minimum(np.searchsorted(np.asarray(edges, dtype=np.int64), steps, side="left"), len(edges) - 1)
    return [int(b) for b in found]


def band_of(steps: int, edges: Sequence[int]) -> int:
    """Index of the first band whose upper edge holds ``steps`` (``edges`` increase: bisection,
    once per unit of a cpsat round, where a scan of up to 22 edges cost ~5% of the placement)."""
    j = bisect.bisect_left(edges, steps)
    return j if j < len(edges) else len(edges) - 1


def solve_levels(
    units: Sequence[Unit],
    kinds: Sequence[tuple[WorkerCost, int]],
    upper_s: float,
    time_limit_s: float,
    seed: int,
) -> LevelPlan | None:
    """Least makespan (to ``PRECISION``) at which some band counts cover the tail; None: no answer.

    Planning view: a worker at band j runs the band's upper edge of steps and keeps its cache
    ``KV_FILL`` full. ``upper_s`` is an achievable makespan (the list-scheduling plan's estimate).
    """
    lengths = [u.steps for u in units]
    edges = band_edges(lengths, BANDS, GRID)
    per_band = band_loads(lengths, [u.kv_steps for u in units], edges)
    demand = [math.ceil(k / KV_UNIT) for k in per_band]

    def serves(c: int, j: int, makespan_s: float) -> float:
        return band_capacity(kinds[c][0], edges[j], makespan_s, KV_FILL)

    def capacity(makespan_s: float) -> list[list[int]]:
        return [[math.floor(serves(c, j, makespan_s)) for j in range(len(edges))] for c in range(len(kinds))]

    deadline = clock.now() + time_limit_s
    if math.prod(n + 1 for _, n in kinds) <= MAX_STATES:
        return _chain_levels(units, [n for _, n in kinds], edges, serves, upper_s * 1.05, deadline)
    found = _bisect(0.0, upper_s * 1.05, capacity, demand, [n for _, n in kinds], deadline, seed)
    if found is None:
        return None
    makespan, counts, proven = found
    return LevelPlan(edges, counts, makespan, "OPTIMAL" if proven else "FEASIBLE")


def _chain_levels(
    units: Sequence[Unit],
    sizes: Sequence[int],
    edges: tuple[int, ...],
    serves: Callable[[int, int, float], float],
    upper_s: float,
    deadline: float,
) -> LevelPlan | None:
    """The band counts from the fluid cover's programme (``scheduler.tailcover``) instead of CP-SAT.

    With every unit credited at its band's upper edge, the nested-coverage model above is the fluid
    cover over those lengths, which a dynamic programme over worker counts solves exactly: bisect
    ``T`` on its shortfall, then walk the best cover's chain back for the counts (each worker at the
    band of the first demand it covers). ``serves(c, j, T)``: KV units a worker of kind ``c`` at
    band ``j`` serves by ``T``. None: no counts cover the batch even by ``upper_s``.
    """
    steps = np.fromiter((u.steps for u in units), dtype=np.int64, count=len(units))
    bands = np.minimum(np.searchsorted(np.asarray(edges), steps, side="left"), len(edges) - 1)
    laid = layout(np.asarray(edges, dtype=np.int64)[bands])
    demand = np.fromiter((u.kv_steps for u in units), dtype=np.float64, count=len(units))
    fluid = FluidCover(laid, demand, sizes)
    at = [edges.index(int(length)) for length in laid.lengths]  # band of each distinct length

    def capacities(makespan_s: float) -> list[FloatArray]:
        return [np.array([serves(c, j, makespan_s) * KV_UNIT for j in at]) for c in range(len(sizes))]

    slack = fluid.shortfall(capacities(upper_s))
    if slack > 0.0:
        return None
    high, closed = _least_root(lambda t: fluid.shortfall(capacities(t)), upper_s, slack, deadline)
    links = fluid.chain(capacities(high))
    if links is None:
        return None
    counts = [[0] * len(edges) for _ in sizes]
    ends, last = fluid.ends, len(units) - 1
    for kind, before in links:
        counts[kind][int(bands[laid.order[min(int(ends.searchsorted(before, side="right")), last)]])] += 1
    return LevelPlan(edges, tuple(tuple(row) for row in counts), high, "OPTIMAL" if closed else "FEASIBLE")


def _least_root(
    gap: Callable[[float], float], high: float, gap_high: float, deadline: float
) -> tuple[float, bool]:
    """The least ``T`` (to ``PRECISION``) with ``gap(T) <= 0``, given ``gap(high) <= 0``, and whether
    the bracket closed before ``deadline``. False position with the Illinois rule (an end kept twice
    has its value halved, so neither end stalls) on the shortfall, which falls from 1 at ``T = 0``
    (nothing served) as ``T`` grows: 4-6 probes where bisection from 0 took 11."""
    low, gap_low, kept = 0.0, 1.0, 0
    while high - low > PRECISION * high:
        if clock.now() >= deadline:
            return high, False
        margin = 0.25 * PRECISION * high  # probes stay inside the bracket, so it always shrinks
        guess = high - gap_high * (high - low) / (gap_high - gap_low)
        guess = min(max(guess, low + margin), high - margin)
        value = gap(guess)
        if value <= 0.0:
            high, gap_high = guess, value
            gap_low, kept = (gap_low / 2.0 if kept == -1 else gap_low), -1
        else:
            low, gap_low = guess, value
            gap_high, kept = (gap_high / 2.0 if kept == 1 else gap_high), 1
    return high, True


def _bisect(
    low: float,
    high: float,
    capacity: Callable[[float], list[list[int]]],
    demand: Sequence[int],
    sizes: Sequence[int],
    deadline: float,
    seed: int,
) -> tuple[float, tuple[tuple[int, ...], ...], bool] | None:
    """Least feasible makespan in ``[low, high]``, its counts, and whether the bracket closed."""
    best: tuple[tuple[int, ...], ...] | None = None
    closed = True
    while high - low > PRECISION * high:
        if clock.now() >= deadline:
            closed = False
            break
        middle = (low + high) / 2.0
        counts, status = cover(capacity(middle), demand, sizes, deadline, seed)
        if counts is not None:
            high, best = middle, counts
        elif status == cp_model.INFEASIBLE:
            low = middle
        else:
            closed = False
            break  # out of time inside a probe: keep what is proven
    if best is None:
        counts, _ = cover(capacity(high), demand, sizes, deadline, seed)
        if counts is None:
            return None
        best = counts
    return high, best, closed


def band_capacity(cost: WorkerCost, steps: int, makespan_s: float, fill: float) -> float:
    """KV units one worker running ``steps`` steps serves by ``makespan_s``: min of the two limits."""
    step_s = cost.time_scale * (cost.mem_base_s + cost.overhead_s)
    per_token = cost.time_scale * cost.mem_per_token_s
    chain = (makespan_s - step_s * steps) / per_token
    full = makespan_s / (per_token + step_s / (fill * cost.kv_capacity_tokens))
    return max(0.0, min(chain, full) / KV_UNIT)

"""Limit (d) of the lower bound: what workers that run long trajectories can still serve.

Limit (c) assumes every worker keeps its cache full, doing useful work, from the first step to the
last. Three things no schedule escapes make that impossible, and this limit charges all three:

- the tail: a worker that hosts a trajectory of ``L`` steps runs at least ``L`` steps, each reading
  its weights (``c`` seconds) whatever else it runs: ``T >= c * N + m * K`` for a worker running
  ``N`` steps that serves ``K`` KV-token-steps (``m`` seconds per cached token per step);
- the ramp-up: at its ``k``-th decode step a worker holds at most ``min(cap, P_S + S * k)`` tokens,
  where ``S`` is its ``max_num_seqs`` and ``P_S`` the sum of the ``S`` largest prompts (no running
  sequence has generated more than ``k`` tokens on it yet). So ``K <= U(N) = sum_{k<N} min(cap,
  P_S + S * k)``, less than ``N * cap`` by about ``(cap - P_S)^2 / (2 S)``: a long CoT worker spends
  its first few thousand steps filling its cache;
- prefill: every prompt token is prefilled once, at ``pp`` seconds per token, on the worker's clock:
  ``T >= c * N + m * K + pp * P_w``.

Prompt tokens enter the demand at ``r`` KV-token-steps each (``r <= pp / m`` for every kind, so the
exchange never overcharges a worker): a worker's capacity for ``K + r * P_w`` by time ``T`` is then
``alpha * A(N) + (1 - alpha) * min(U(N), A(N))`` with ``A(N) = (T - c * N) / m`` and ``alpha = r * m
/ pp``, maximised over ``N`` at least its longest trajectory; the maximum lies at that length or
where ``U`` meets ``A`` (the function is convex before that point and falling after). A larger ``r``
credits more prefill but lets a worker trade ramp-up for prefill; each ``r`` is a bound (which ones:
``scheduler.prefill_shares``, with the proof), so the largest over a few is too.

Which workers host which lengths is a covering question, answered twice:

- ``scheduler.tailcover``, the fluid cover: every trajectory its own length band, demand divisible,
  solved exactly by a dynamic programme (no solver). The largest ``T`` at which it falls short is
  found by a secant search on its shortfall (a slack that is continuous and increasing in ``T``,
  concave near the root, so the secant steps stay below it and converge in 4-6 probes, each proven);
- ``scheduler.tailbands``, the band cover with whole trajectories: probed once just above the fluid
  bound, and searched further only where the few longest trajectories cannot be shared out.

Pins and KV fit are dropped: a relaxation of every schedule the simulator can play (property tests
check it). Prefix affinity is kept by the units: under it each unit is a group, at its longest
member's length with its members' demands summed, since a worker that hosts a group hosts all of it.
Every probe is deterministic (a dynamic programme, or CP-SAT under a deterministic limit), so the
bound is reproducible.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from scheduler import clock, giveup
from scheduler.costmodel import WorkerCost
from scheduler.kindlimits import AtLengths, KindLimits, kind_limits
from scheduler.policies.levels import IntArray
from scheduler.prefill_shares import PREFILL_SHARES, shares_bound
from scheduler.stepsum import FloatArray
from scheduler.tailbands import BandCover
from scheduler.tailcover import FluidCover, knots, layout

T = TypeVar("T")
PRECISION = 0.0005  # the fluid search stops when its bracket on T is this tight (relative); as
# cheap as 0.002 (the secant converges fast: 6-7 probes either way) and 0.1% tighter
PROOF_MARGIN = 1e-9  # a shortfall proves infeasibility only above this (float error of the sums)
BAND_PRECISION = 0.002  # the band cover's check and bisection (CP-SAT probes: each costs more)
MAX_PROBES = 12  # fluid probes per exchange rate (benchmark batches: 5-8 for the first, 1 for the second)
AIM = 0.5  # probes aim this many precisions below the estimated root
FIRST_SLOPE = 3.0  # shortfall per relative makespan, the first step's guess (measured 2.3-4 on benchmarks)
BAND_PROBES = 8  # band-model bisection probes, when whole trajectories lift the bound above the fluid one
STEP_UP = 1.25  # the band bracket above the fluid bound grows by this factor until a cover exists
STEP_UPS = 6  # at most 1.25^6 = 3.8x


def tail_bound(
    lengths: Sequence[int] | IntArray,
    kv_steps: Sequence[float] | FloatArray,
    prompts: FloatArray,
    kinds: Sequence[tuple[WorkerCost, int]],
    known_s: float,
    grid: int = 0,
    precision: float = PRECISION,
    deadline: float | None = None,
    fluid_deadline: float | None = None,
    heads: FloatArray | None = None,
    ranked: Sequence[Sequence[tuple[WorkerCost, int]]] | None = None,
) -> float:
    """A lower bound on the makespan, at least ``known_s`` (a bound proven otherwise).

    Each of ``lengths``, ``kv_steps`` and ``prompts`` has one entry a unit: a trajectory, or under
    prefix affinity a group (its longest member, its members' sums), which a worker hosts whole. The
    ramp-up's prompt head is read from ``heads``, the single trajectories' prompts (default: ``prompts``).

    The fluid cover's bound (``_fluid_bound``), then the band cover's check for whole
    trajectories. ``grid`` adds band edges at every ``1/grid`` of the longest length to that
    check; ``precision`` is the fluid search's (finer: a little tighter, a probe or two more). The
    check's CP-SAT probes (0.2 ms where the greedy cover settles them, ~11 ms near the root) stop
    past ``deadline``, the fluid searches' past ``fluid_deadline`` (a probe takes well under a
    millisecond for a few worker kinds, but ~12 ms for 14-16, where the cover has 65k states), each
    keeping what it proved.

    ``kinds`` are ``(cost, count)``, each credited ``count`` times at ``cost``'s speed (a kind's
    fastest). ``ranked``, if given, is what the fluid cover reads instead: per family of identical
    coefficients its speed groups fastest first, each at its fastest member's cost, and the cover
    credits a family's ``a``-th worker as its ``a``-th fastest (``scheduler.tailcover``).
    """
    late = Late(deadline, fluid_deadline)
    if len(lengths) == 0 or late():
        return known_s
    steps = np.asarray(lengths, dtype=np.int64)
    work = np.asarray(kv_steps, dtype=np.float64)
    head = np.sort(prompts if heads is None else heads)[::-1]  # once for every kind and family
    limits = [(kind_limits(cost, head, descending=True), n) for cost, n in kinds]
    families = _families(limits, ranked, head)
    exchange = _exchange(limits, families)
    if late():
        return known_s
    rows = _FluidRows(steps, families)
    if late():
        return known_s
    fluid_timed = Timed(fluid_deadline)
    bound = _fluid_bound(rows, work, prompts, exchange, known_s, precision, fluid_timed)
    bands: dict[float, BandCover] = {}  # built at a share's first probe: none past the deadline

    def band(share: float) -> BandCover:
        if share not in bands:
            bands[share] = BandCover(steps, work + share * exchange * prompts, limits, share * exchange, grid)
        return bands[share]

    return _bisect(lambda t: any(band(s).infeasible(t) for s in PREFILL_SHARES), bound, Timed(deadline))


def _families(
    limits: Sequence[tuple[KindLimits, int]],
    ranked: Sequence[Sequence[tuple[WorkerCost, int]]] | None,
    heads: FloatArray,
) -> list[Family]:
    """What the fluid cover credits: each kind of ``limits`` as a family of one speed group, or,
    with ``ranked``, its families of speed groups (``tail_bound``'s ``ranked``); ``heads`` sorted
    largest first."""
    if ranked is not None:
        return [_family(family, heads) for family in ranked]
    return [Family(lim, np.ones(1), np.array([n])) for lim, n in limits]


def _exchange(limits: Sequence[tuple[KindLimits, int]], families: Sequence[Family]) -> float:
    """The smallest ``pp / m`` over every kind and family: the top of the exchange rates ``r`` that
    never overcharge a worker (module doc)."""
    return min(
        lim.prefill_s / lim.per_token_s
        for lim in [*(lim for lim, _ in limits), *(f.limits for f in families)]
    )


def _fluid_bound(
    rows: _FluidRows,
    work: FloatArray,
    prompts: FloatArray,
    exchange: float,
    known_s: float,
    precision: float,
    timed: Timed,
) -> float:
    """The fluid cover's bound on ``rows`` at the prompt tokens' shares of the ``exchange`` rate that
    ``prefill_shares.shares_bound`` tries, each search starting where the last stopped; >= ``known_s``."""

    def search(share: float, low: float) -> float:
        rate = share * exchange
        return _search(rows.gap(work + rate * prompts, rate), low, precision, timed)

    return shares_bound(search, known_s)


class Timed:
    """Runs a probe only while one as long as the longest so far still ends by ``deadline``.

    Only a probe's proof ever raises a bound, so stopping early leaves a looser bound, never a wrong
    one. Before the fluid searches had one, a pool of 14-16 worker kinds (65k cover states a probe)
    spent 0.3 s of a 1 ms planning budget proving its bound.
    """

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline
        self.longest = 0.0

    def __call__(self, probe: Callable[[float], T], t: float) -> T | None:
        """``probe(t)``, or None when it might end past the deadline (not started)."""
        giveup.check()  # the caller's hard deadline, before the budget's
        started = clock.now()
        if self.deadline is not None and started + self.longest > self.deadline:
            return None
        result = probe(t)
        self.longest = max(self.longest, clock.now() - started)
        return result


class Late:
    """Whether every probe of the bound would now be refused (``Timed``): both deadlines given and
    passed, so what is left of the set-up could only be thrown away.

    Why. The set-up before the first probe (each kind's limits, the fluid rows: ~0.8 ms of CPU at
    4,096 x 32) ran whatever the clock said, and on a loaded host ``prepare`` can reach the bound
    past its shares, or be descheduled in the set-up until past them: the bound then spent several
    ms of wall building what no probe read (docs/experiments.md, sched53). Returning ``known_s``
    there is what the refused probes would have returned, to the bit (``_search`` and ``_bisect``
    keep their ``low``), so the bound is the same, only sooner.
    """

    def __init__(self, deadline: float | None, fluid_deadline: float | None) -> None:
        self.last = None if deadline is None or fluid_deadline is None else max(deadline, fluid_deadline)

    def __call__(self) -> bool:
        """True once ``clock.now()`` is past both deadlines (never where either is None)."""
        return self.last is not None and clock.now() > self.last


@dataclass(frozen=True, slots=True)
class Family:
    """Workers of identical coefficients but for the time scale, in speed groups fastest first."""

    limits: KindLimits  # the fastest group's
    ratios: FloatArray  # each group's speed relative to the fastest's (its scale / the group's), <= 1
    counts: IntArray  # workers per group


def _family(groups: Sequence[tuple[WorkerCost, int]], heads: FloatArray) -> Family:
    """A family (``tail_bound``'s ``ranked``) as its fastest group's limits and the groups' speeds
    (``heads``: the prompts, largest first)."""
    fastest = groups[0][0].time_scale
    ratios = np.array([fastest / cost.time_scale for cost, _ in groups])
    counts = np.array([n for _, n in groups], dtype=np.int64)
    return Family(kind_limits(groups[0][0], heads, descending=True), ratios, counts)


class _FluidRows:
    """What every fluid search of one bound shares (six a bound: the two ends and four blends): the
    lengths laid out longest first, the speed groups' knots, the workers per family and their ranks,
    and each family's capacity at its lengths (``kindlimits.AtLengths``); built once a bound, where
    each search built them again (~0.5 ms a search at 4,096 x 32, docs/experiments.md, bound52)."""

    def __init__(self, steps: IntArray, families: Sequence[Family]) -> None:
        self.laid = layout(steps)
        self.grid = knots(self.laid.lengths)
        self.families = families
        self.sizes = [int(f.counts.sum()) for f in families]
        self.ranks = [np.repeat(np.arange(f.counts.size), f.counts) for f in families]
        self.rows = [
            AtLengths(f.limits, self.laid.lengths if f.counts.size == 1 else self.grid[0]) for f in families
        ]

    def gap(self, demand: FloatArray, rate: float) -> Callable[[float], float]:
        """The fluid cover's shortfall as a function of the makespan (positive: proven infeasible).

        A family of one speed group is one capacity row over the distinct lengths, as a kind always
        was. Several are a row each, fastest first, over coarser lengths (``tailcover.knots``: a
        group's capacity at the length rounded down, at least its own), a group at the fastest's
        limits with the makespan scaled by its relative speed; the cover ranks the family's workers
        by them."""
        built: list[FluidCover] = []  # at the first probe: a search whose probes are all refused builds none
        pairs = list(zip(self.families, self.rows, strict=True))

        def capacities(t: float) -> list[FloatArray]:
            return [
                rows.serves(t, rate) if f.counts.size == 1 else rows.serves_grid(t * f.ratios, rate)
                for f, rows in pairs
            ]

        def reach(t: float) -> list[FloatArray]:  # the most steps each group's fastest runs by t
            out: list[FloatArray] = [t * f.ratios / f.limits.step_s for f in self.families]
            return out

        def shortfall(t: float) -> float:
            if not built:
                built.append(FluidCover(self.laid, demand, self.sizes, self.ranks, self.grid))
            return built[0].shortfall(capacities(t), reach(t))

        return shortfall


def _search(gap: Callable[[float], float], low: float, precision: float, timed: Timed) -> float:
    """The largest makespan ``gap`` proves infeasible, to ``precision``, and at least ``low``.

    A secant search on the shortfall through the last two probes (the first step guesses the
    slope), each probe kept at least ``precision`` inside the bracket and aimed a little below the
    estimated root, so that it proves a new ``low`` and the next one, just above, closes the bracket.
    Only a probe's proof moves ``low``: the interpolation decides where to look, never the answer.
    """
    high = math.inf
    points: list[tuple[float, float]] = []
    guess = low * (1.0 + precision)
    for _ in range(MAX_PROBES):
        value = timed(gap, guess)
        if value is None:
            break
        points.append((guess, value))
        if value > PROOF_MARGIN:
            low = guess
        else:
            high = guess
        if math.isfinite(high) and high - low <= precision * high:
            break
        guess = _next_guess(points, low, high, precision)
    return low


def _next_guess(points: list[tuple[float, float]], low: float, high: float, precision: float) -> float:
    """Where the shortfall is estimated to reach zero, kept at least ``precision`` inside the bracket."""
    last_t, last_gap = points[-1]
    if len(points) >= 2 and points[-2][1] != last_gap:
        prev_t, prev_gap = points[-2]
        root = last_t + (last_t - prev_t) * last_gap / (prev_gap - last_gap)
    else:
        root = last_t * (1.0 + last_gap / FIRST_SLOPE)
    root *= 1.0 - AIM * precision
    lowest, highest = low * (1.0 + precision), high * (1.0 - precision)
    if lowest >= highest:
        return (low + high) / 2.0
    if not math.isfinite(root):
        return lowest if math.isfinite(high) else low * STEP_UP
    return min(max(root, lowest), highest)


def _bisect(proven: Callable[[float], bool], low: float, timed: Timed) -> float:
    """The band cover's bound above ``low`` (proven): nothing to add unless it proves ``low`` raised
    by ``BAND_PRECISION``; then a growing bracket and a bisection (the band cover has no slack to
    interpolate on). On benchmark batches the greedy cover usually settles the one probe without a
    solve (2 of 12: CP-SAT confirms a cover in 4-17 ms). A request whose prompts each have one
    predicted length for all their samples can take a dozen solves (~50 ms at 1,024 x 16), so its
    probes are ``timed`` too."""
    high = low * (1.0 + BAND_PRECISION)
    if not timed(proven, high):
        return low
    for _ in range(STEP_UPS):
        low, high = high, high * STEP_UP
        if not timed(proven, high):
            break
    else:
        return low
    for _ in range(BAND_PROBES):
        if high - low <= BAND_PRECISION * high:
            break
        middle = (low + high) / 2.0
        result = timed(proven, middle)
        if result is None:
            break
        if result:
            low = middle
        else:
            high = middle
    return low

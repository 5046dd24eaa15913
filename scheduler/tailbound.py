"""Limit (d) of the lower bound: the band model of ``scheduler.policies.levels`` as a relaxation.

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

Prompt tokens enter the band demand at ``r`` KV-token-steps each (``r <= pp / m`` for every kind,
so the exchange never overcharges a worker): a worker's capacity for ``K + r * P_w`` by time ``T``
is then ``alpha * A(N) + (1 - alpha) * min(U(N), A(N))`` with ``A(N) = (T - c * N) / m`` and
``alpha = r * m / pp``, maximised over ``N`` at least the band's lower edge; the maximum lies at the
edge or where ``U`` meets ``A`` (the function is convex before that point and falling after). A
larger ``r`` credits more prefill but lets a worker trade ramp-up for prefill; each ``r`` gives a
valid bound, so the largest over a few is too.

Workers are counted per length band exactly as in planning (nested cover, Hall's condition), with
capacities rounded up and demands down; the largest makespan at which CP-SAT proves the cover
infeasible under some exchange rate is the bound (one bisection for all rates: a probe is settled
as soon as one rate's cover is proven impossible). Pins, KV fit and group affinity are dropped: a
relaxation of every schedule the simulator can play (property tests check it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from scheduler.costmodel import WorkerCost
from scheduler.policies.levels import KV_UNIT, IntArray, ItemCounts, band_edges, band_loads, cover
from scheduler.stepsum import FloatArray

BOUND_BANDS = 10  # finer bands tighten the bound (lower edges nearer the lengths); it costs no placement
BOUND_PROBES = 8  # bisection probes of the bound: 0.2% of a 25% bracket
STEP_UP = 1.25  # the bracket above the known bound grows by this factor until a cover exists
STEP_UPS = 6  # at most 1.25^6 = 3.8x the known bound
PRECISION = 0.002  # bisection stops when the bracket on T is this tight (relative)
PREFILL_SHARES = (0.0, 1.0)  # r as shares of min over kinds of pp / m: ramp-up binds at 0, prefill at 1


@dataclass(frozen=True, slots=True)
class KindLimits:
    """What bounds one worker kind's work by a makespan: step, token and prefill costs, and ramp-up."""

    step_s: float  # c: seconds every decode step costs (weights read + overhead)
    per_token_s: float  # m: seconds per cached token per decode step
    prefill_s: float  # pp: seconds per prefilled prompt token
    capacity: float  # KV cache, tokens
    slots: int  # S: max_num_seqs
    prompt_head: float  # P_S: the S largest prompts of the batch, summed

    def ramp(self, steps: float) -> float:
        """U(N): the most KV-token-steps ``steps`` decode steps can serve (a real ``N`` interpolates)."""
        fill = max(0.0, (self.capacity - self.prompt_head) / self.slots)  # steps until the cache can be full
        if steps <= fill:
            return steps * self.prompt_head + self.slots * steps * (steps - 1.0) / 2.0
        return self.ramp(fill) + self.capacity * (steps - fill)

    def serves(self, steps: float, makespan_s: float, rate: float) -> float:
        """The most ``K + rate * P_w`` a worker of this kind running at least ``steps`` steps serves."""
        alpha = rate * self.per_token_s / self.prefill_s

        def value(n: float) -> float:
            chain = (makespan_s - self.step_s * n) / self.per_token_s
            return alpha * chain + (1.0 - alpha) * min(self.ramp(n), chain)

        return max(0.0, value(steps), value(self._crossing(steps, makespan_s)))

    def _crossing(self, low: float, makespan_s: float) -> float:
        """The N >= ``low`` where U(N) meets A(N): U rises and A falls, so there is one (closed form)."""
        slope = self.step_s / self.per_token_s  # A(N) = makespan / m - slope * N
        budget = makespan_s / self.per_token_s
        fill = max(0.0, (self.capacity - self.prompt_head) / self.slots)
        b = self.prompt_head - self.slots / 2.0 + slope  # S/2 N^2 + b N - budget = 0 while filling
        n = (-b + math.sqrt(b * b + 2.0 * self.slots * budget)) / self.slots
        if n > fill:  # past the ramp: U(fill) + cap * (N - fill) = budget - slope * N
            n = (budget - self.ramp(fill) + self.capacity * fill) / (self.capacity + slope)
        return max(low, n)


def kind_limits(cost: WorkerCost, prompts: FloatArray) -> KindLimits:
    """The limits of ``cost``'s kind for a batch with these prompt lengths."""
    head = float(np.sort(prompts)[::-1][: cost.max_num_seqs].sum())
    return KindLimits(
        step_s=cost.time_scale * (cost.mem_base_s + cost.overhead_s),
        per_token_s=cost.time_scale * cost.mem_per_token_s,
        prefill_s=cost.time_scale * cost.prefill_per_token_s,
        capacity=float(cost.kv_capacity_tokens),
        slots=cost.max_num_seqs,
        prompt_head=head,
    )


def tail_bound(
    lengths: Sequence[int] | IntArray,
    kv_steps: Sequence[float] | FloatArray,
    prompts: FloatArray,
    kinds: Sequence[tuple[WorkerCost, int]],
    known_s: float,
    grid: int = 0,
) -> float:
    """A lower bound on the makespan, at least ``known_s`` (a bound proven otherwise).

    The best over ``PREFILL_SHARES`` of the band relaxation; each search is a fixed number of
    probes with deterministic solver limits, so the bound is reproducible. ``grid`` adds band edges
    at every ``1/grid`` of the longest length: a worker's credited steps come nearer its longest
    trajectory, a tighter bound at ~10x the cost (benchmarks use it; plans do not).
    """
    if len(lengths) == 0:
        return known_s
    limits = [(kind_limits(cost, prompts), n) for cost, n in kinds]
    exchange = min(lim.prefill_s / lim.per_token_s for lim, _ in limits)
    relaxations = [
        _Relaxation(
            lengths, np.asarray(kv_steps) + share * exchange * prompts, limits, share * exchange, grid
        )
        for share in PREFILL_SHARES
    ]

    def proven(makespan_s: float) -> bool:  # no schedule finishes by then: some relaxation has no cover
        return any(r.infeasible(makespan_s) for r in relaxations)

    low, high = known_s, known_s * STEP_UP
    for _ in range(STEP_UPS):  # find a makespan no relaxation rules out
        if not proven(high):
            break
        low, high = high, high * STEP_UP
    else:
        return low
    for _ in range(BOUND_PROBES):  # bisection: ``low`` proven (or known), ``high`` not proven
        if high - low <= PRECISION * high:
            break
        middle = (low + high) / 2.0
        if proven(middle):
            low = middle
        else:
            high = middle
    return low


class _Relaxation:
    """The band cover of one prefill exchange rate, probed at one makespan at a time."""

    def __init__(
        self,
        lengths: Sequence[int] | IntArray,
        demand_steps: FloatArray,
        limits: Sequence[tuple[KindLimits, int]],
        rate: float,
        grid: int,
    ) -> None:
        self.edges = _edges(lengths, grid)
        self.demand = [math.floor(k / KV_UNIT) for k in band_loads(lengths, demand_steps, self.edges)]
        self.needed, self.smallest, self.shortest = _band_items(lengths, demand_steps, self.edges)
        self.limits, self.rate = limits, rate
        self.sizes = [n for _, n in limits]

    def infeasible(self, makespan_s: float) -> bool:
        """Whether CP-SAT proves that no band cover exists by ``makespan_s``."""
        most = [
            [lim.serves(steps, makespan_s, self.rate) for steps in self.shortest] for lim, _ in self.limits
        ]
        units = [[math.ceil(v / KV_UNIT) for v in row] for row in most]
        bands = range(len(self.edges))
        room = tuple(
            tuple(tuple(_whole(row[k], self.smallest[j]) if k >= j else 0 for j in bands) for k in bands)
            for row in most
        )
        status = cover(units, self.demand, self.sizes, None, 0, ItemCounts(self.needed, room))[1]
        return bool(status == cp_model.INFEASIBLE)


def _edges(lengths: Sequence[int] | IntArray, grid: int) -> tuple[int, ...]:
    """``band_edges`` plus, per grid point, the longest length at or below it."""
    edges = set(band_edges(lengths, BOUND_BANDS))
    ordered = np.sort(np.asarray(lengths, dtype=np.int64))
    for k in range(1, grid):
        below = int(np.searchsorted(ordered, int(ordered[-1]) * k // grid, side="right"))
        if below > 0:
            edges.add(int(ordered[below - 1]))
    return tuple(sorted(edges))


def _band_items(
    lengths: Sequence[int] | IntArray, demand_steps: FloatArray, edges: Sequence[int]
) -> tuple[tuple[int, ...], list[float], list[int]]:
    """Per band j: how many units lie in bands >= j, the smallest demand among them, and the
    shortest unit of band j itself (a worker at band j runs at least that many steps)."""
    steps = np.asarray(lengths, dtype=np.int64)
    bands = np.minimum(np.searchsorted(np.asarray(edges), steps, side="left"), len(edges) - 1)
    needed, smallest, shortest = [], [], []
    previous = 0
    for j, edge in enumerate(edges):
        tail, own = demand_steps[bands >= j], steps[bands == j]
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

"""The numeric view of a plan request that the length-aware policies share.

Policies place *units*: a single trajectory, or with ``prefix_affinity`` a whole group (its samples
share a prompt prefix, so they must land on one worker). Each unit carries the totals the load model
needs (decode tokens, KV-token-steps, prompt tokens, longest run) and the workers that may take it:
not excluded, the pinned worker when any sample is pinned, and a KV cache that holds every sample at
its generation cap. Built once per request in ``O(n)`` and then read by index, never re-derived.
Workers with identical coefficients, up to a small spread of speed, form a kind (``worker_kinds``):
the unit of every aggregate decision, since such workers are (nearly) interchangeable.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from functools import reduce
from operator import add, itemgetter
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from scheduler import giveup
from scheduler.at_once import ends_at_once
from scheduler.batch_columns import BatchColumns
from scheduler.costmodel import WorkerCost, speed_clusters, worker_cost
from scheduler.finish import queue_finishes, worker_finish
from scheduler.gcpause import collector_paused
from scheduler.policies.plan_draws import SeededDraws, Spread
from scheduler.policies.problem_columns import Columns, trajectory_columns
from scheduler.policies.unholdable import Unholdable, refuse_unholdable
from scheduler.sim_rules import DEFAULT_ENGINE
from scheduler.types import PlanRequest
from scheduler.validation import validate_unique_keys

GIVE_UP_EVERY = 4096  # units built between the caller's hard-deadline checks (``_single_units``)
SPEED_TOLERANCE = 0.25  # relative spread of time scales within one kind (``worker_kinds``): a pool
# whose learned speeds scatter by +-10% around one device's stays one kind


class Unit(NamedTuple):
    """Trajectories that must share a worker, with their summed load.

    A NamedTuple, not a frozen dataclass: a plan builds one per trajectory (32k at the largest
    benchmark size), and a frozen dataclass costs twice as much to construct.
    """

    members: tuple[int, ...]  # trajectory indices, input order
    steps: int  # longest member's decode steps: the unit's critical chain
    tokens: int  # decode tokens of all members
    kv_steps: float  # KV-token-steps of all members: sum of p*L + L*(L-1)/2
    prompt_tokens: int  # prefill tokens of all members
    allowed: tuple[int, ...]  # worker indices (inventory order) that may take the unit


@dataclass(frozen=True, slots=True)
class Problem:
    """A validated request, as arrays and units."""

    costs: tuple[WorkerCost, ...]  # per inventory worker
    prompts: tuple[int, ...]  # per trajectory: prompt tokens
    steps: tuple[int, ...]  # per trajectory: planned decode steps
    units: tuple[Unit, ...]  # placement units, input order of their first member (so with as many
    # units as trajectories, unit u is exactly trajectory u)
    active: tuple[int, ...]  # worker indices not excluded
    # Derived once by ``build_problem``, where the columns are at hand as arrays; every LPT pass reads
    # them (2-3 a cpsat plan), and deriving them from the units took ~18 ms a pass at 32,768 units.
    # A problem built elsewhere (a sub-problem) leaves the defaults, and readers derive them.
    ranked: tuple[int, ...] = ()  # unit indices longest first (``longest_first``); () = not derived
    unrestricted: bool = False  # every unit may go to every active worker (no pin, every cache fits)
    kv_steps: tuple[float, ...] = ()  # per trajectory: KV-token-steps, p*L + L*(L-1)/2 (``item_totals``);
    # () = not derived. The length-blind bar's floor summed them item by item in Python, ~4 ms a plan
    # at 4,096 and ~40 ms at 32,768, though ``build_problem`` computes them for the units anyway
    engine: str = DEFAULT_ENGINE  # the request's engine (``PlanRequest.engine``): what the hedges'
    # drawn plays follow under vLLM admission (``robust_order.draw_rules``)
    plays: dict[tuple[WorkerCost, tuple[int, ...], bool], tuple[float, float]] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )  # ``played``'s memo: (cost, queue, reserve) -> (clock, the bound it was played to)
    at_once: dict[tuple[tuple[tuple[int, ...], ...], bool], tuple[bool, ...]] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )  # ``runs_at_once``'s memo: (queues, reserve) -> per worker. Neither memo has a lock: each entry is
    # stored whole and true whoever wrote it, so a race only plays again (test_problem_memos_threads.py)
    seeded: dict[int, SeededDraws] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )  # ``draws``' memo: seed -> the draws of the spread last asked with it
    seeding: threading.Lock = field(default_factory=threading.Lock, init=False, compare=False, repr=False)
    # ``draws``' look-up and store as one step: threads asking first each built their own draws

    def __reduce__(self) -> tuple[type[Problem], tuple[object, ...]]:
        """Pickled and copied (a process pool, ``copy``, ``deepcopy``) as its fields, with fresh memos:
        the memos are one plan's caches, and a lock (``seeding``, each ``SeededDraws``') cannot be
        pickled, so a problem pickled whole failed, and one whose draws were asked failed before."""
        return Problem, tuple(getattr(self, f.name) for f in fields(self) if f.init)

    def item_totals(self, items: Sequence[int]) -> tuple[int, int, float, int]:
        """The load totals of trajectories ``items`` (``load.Load``'s fields: longest steps, decode
        tokens, KV-token-steps, prompt tokens), as summing them one by one in ``items``' order gives
        them: the floats are added in that order, so the result is the same to the last bit."""
        if not items:
            return 0, 0, 0.0, 0
        if not self.kv_steps:  # a problem built elsewhere: derive them as ``trajectory_columns`` does
            return _totals_one_by_one(self.prompts, self.steps, items)
        pick = itemgetter(*items)  # C-level gathers: one item gives a bare value, not a tuple
        steps, kv, prompts = (pick(self.steps), pick(self.kv_steps), pick(self.prompts))
        if len(items) == 1:
            return steps, steps, kv, prompts
        return max(steps), sum(steps), reduce(add, kv, 0.0), sum(prompts)

    def finishes(self, queues: Sequence[Sequence[int]], reserve: bool) -> list[float]:
        """Predicted finish of every worker playing its ordered queue (``scheduler.finish``)."""
        return queue_finishes(self.costs, self.prompts, self.steps, queues, reserve)

    def played(
        self, cost: WorkerCost, queue: Sequence[int], reserve: bool, stop_at: float = math.inf
    ) -> float:
        """``worker_finish`` of ``queue`` on ``cost``, the same value where the play ends before
        ``stop_at``, else a value of at least ``stop_at``: what a caller comparing candidate
        orders against the best so far reads. Each play is kept for the life of the problem (one
        plan), and a queue played again on an equal cost is answered from it where that suffices.

        Why. A plan plays the same queue again: cpsat's second round orders the workers its
        re-placement left unchanged again, with the same bounds, and the critical worker's
        refinement repeats; the lpt start's queues are played again when their finishes are asked
        for. On the long chain-of-thought headline's 6-step replay that was 0.2-0.7 s of a 3-9 s
        plan (steps 0-2, docs/experiments.md). A kept full play answers every bound (its finish,
        or at least the bound when it ends past it); a play stopped at a bound answers a bound no
        later than the value it reported (its clock, or sooner the clock plus a lower bound of the
        work left: ``scheduler.finish_loops``), which is at most its finish.
        """
        key = (cost, tuple(queue), reserve)
        known = self.plays.get(key)
        if known is not None and (known[1] == math.inf or stop_at <= known[0]):
            return known[0]
        clock = worker_finish(cost, *self.lengths(queue), reserve, stop_at=stop_at)
        self.plays[key] = (clock, math.inf if clock < stop_at else stop_at)
        return clock

    def runs_at_once(self, queues: Sequence[Sequence[int]], reserve: bool) -> tuple[bool, ...]:
        """Per worker, whether its queue runs at once on the planned lengths (``ends_at_once``; an
        empty queue does), kept for the life of the problem (one plan).

        Why. The orders' hedge (``robust_order``) asks it of the lpt plan to find the queues it
        may reorder, and where it reorders none the at-once hedge (``robust_fast``) asks it of the
        same queues next: 1.5-2.5 ms twice at 4,096 x 32, before the judgment the service's 80 ms
        default had no time for (docs/experiments.md, budget50). Each queue's verdict is its own
        (``ends_at_once`` plays each as its one-queue form), so one pass over every queue answers
        both."""
        key = (tuple(tuple(queue) for queue in queues), reserve)
        known = self.at_once.get(key)
        if known is None:
            busy = [w for w, queue in enumerate(key[0]) if queue]
            ends = ends_at_once([(self.costs[w], *self.lengths(key[0][w])) for w in busy], reserve)
            runs = [True] * len(key[0])
            for w, run in zip(busy, ends, strict=True):
                runs[w] = run is not None
            known = self.at_once[key] = tuple(runs)
        return known

    def draws(self, spread: Spread, seed: int) -> SeededDraws:
        """The draws of ``spread``'s lengths from ``seed`` (``plan_draws.SeededDraws``), kept for the
        life of the problem (one plan): every judgment of the plan reads the same rows, drawn once
        (``scheduler.policies.plan_draws``: 3-5 ms each time at 4,096 x 32). Kept per seed for the
        spread object last asked (a plan computes its spread once), which the memo holds, so a new
        spread can never be taken for an old one.

        Built once under ``seeding``: the rows were the same either way (seeded), but threads asking
        first each built a ``SeededDraws`` and drew its rows, and each kept its own, so the plan's
        draws were drawn once a thread rather than once (``planner.Prepared`` is shared by every
        plan of a request, which a caller may make from several threads). Building one draws
        nothing (its rows are drawn as asked), so the lock is held for a fraction of a millisecond
        (0.1 ms of CPU at 4,096 trajectories, 0.4 ms at 32,768: a generator and a pass over the spread)."""
        with self.seeding:
            known = self.seeded.get(seed)
            if known is None or known.spread is not spread:
                known = self.seeded[seed] = SeededDraws(spread, seed)
        return known

    def lengths(self, queue: Sequence[int]) -> tuple[list[int], list[int]]:
        """The prompts and planned steps of ``queue``'s trajectories, in its order: what the
        worker model (``scheduler.finish``) plays."""
        return [self.prompts[i] for i in queue], [self.steps[i] for i in queue]


def build_problem(request: PlanRequest) -> Problem:
    """Resolve costs, planned lengths and units for ``request``: a policy's own problem, where it is
    called without the planner's (``scheduler.policies.unholdable``: a batch no worker may hold, or
    holding one key twice, is refused in the validation's words)."""
    problem = problem_and_bound_columns(request)[0]
    # After the build, so a request breaking an earlier rule too is refused for that one, as the
    # planner refuses it; the planner's own path (``problem_and_bound_columns``) never pays this.
    validate_unique_keys(request)
    return problem


def problem_and_bound_columns(request: PlanRequest) -> tuple[Problem, BatchColumns]:
    """``build_problem``, with the lower bound's columns (``scheduler.batch_columns``) from the same
    arrays, for ``planner.prepare`` to hand to the bound.

    Why beside the problem, not on it. The columns describe the request's trajectories; kept as a
    field of the problem, a ``dataclasses.replace`` of it with another batch's prompts and steps
    kept the first batch's columns, and a bound read from them would be another batch's. A problem
    holds nothing of its batch that a replace of its batch's fields leaves behind."""
    with collector_paused():  # tens of thousands of acyclic tuples: see scheduler.gcpause
        return _build_problem(request)


def _build_problem(request: PlanRequest) -> tuple[Problem, BatchColumns]:
    """The per-trajectory columns, then one unit per trajectory, or per group under affinity.

    The caller's hard deadline is checked between the three (``scheduler.giveup``): each is a pass
    over the batch, together 16 ms quiet at 16,384 trajectories, unchecked until the problem's end
    (the give-up came up to 20 ms past the deadline beside 2 CPU burners: docs/experiments.md,
    deadline48)."""
    workers = request.inventory.workers
    costs = tuple(worker_cost(w, request.inventory.model) for w in workers)
    index_of = {w.worker_id: i for i, w in enumerate(workers)}
    active = tuple(i for i, w in enumerate(workers) if w.worker_id not in request.excluded_workers)
    if not request.trajectories:  # least_loaded, lpt and cpsat divided by its size (edges59)
        refuse_unholdable(request)
    columns = trajectory_columns(request)
    giveup.check()
    try:
        pins = [-1 if t.pinned_worker is None else index_of[t.pinned_worker] for t in request.trajectories]
    except KeyError:  # a pin naming no worker of the inventory
        refuse_unholdable(request)
    giveup.check()
    allowed = _Allowed(costs, active)
    try:
        if not request.prefix_affinity:
            units, ranked, unrestricted = _single_units(columns, pins, allowed)
        else:
            units = _group_units(request, columns, pins, allowed)
            unrestricted = all(len(u.allowed) == len(active) for u in units)
            ranked = tuple(longest_first(units))
    except Unholdable:  # a unit no active worker can hold
        refuse_unholdable(request)
    kv_steps = tuple(columns.kv_steps)
    problem = Problem(
        costs, columns.prompts, columns.steps, units, active, ranked, unrestricted, kv_steps, request.engine
    )
    return problem, columns.bound


def _totals_one_by_one(
    prompts: Sequence[int], steps: Sequence[int], items: Sequence[int]
) -> tuple[int, int, float, int]:
    """``Problem.item_totals`` without the column: each item's KV-token-steps from its lengths."""
    longest = tokens = prompt = 0
    kv = 0.0
    for i in items:
        length, p = steps[i], prompts[i]
        longest = max(longest, length)
        tokens += length
        prompt += p
        kv += p * length + length * (length - 1) / 2
    return longest, tokens, kv, prompt


class _Allowed:
    """The workers a unit may take: active, its pinned ones if any, with a cache that holds its
    largest need; ``Unholdable`` where none qualifies, or the unit is pinned to two workers.

    None qualifies only in a request the validation refuses. A policy called directly, not through
    the planner, was handed every active worker then: a trajectory pinned to a drained worker was
    placed on another, one longer than every cache was planned as if it fitted, and ``lpt`` ordering
    a prompt that fills its worker's cache never returned (edges59).

    Memoised by (pins, capacity rank): a batch has a few distinct answers, shared by most units."""

    def __init__(self, costs: Sequence[WorkerCost], active: tuple[int, ...]) -> None:
        self.costs, self.active, self.active_set = costs, active, frozenset(active)
        self.capacities = sorted({c.kv_capacity_tokens for c in costs})
        self.cache: dict[tuple[tuple[int, ...], int], tuple[int, ...]] = {}

    def __call__(self, pinned: tuple[int, ...], most: int) -> tuple[int, ...]:
        key = (pinned, bisect.bisect_left(self.capacities, most))  # same key, same fitting workers
        if key not in self.cache:
            costs, active_set = self.costs, self.active_set
            fit = tuple(
                w for w in (pinned or self.active) if w in active_set and costs[w].kv_capacity_tokens >= most
            )
            if not fit or len(pinned) > 1:
                raise Unholdable
            self.cache[key] = fit
        return self.cache[key]


def _single_units(
    columns: Columns, pins: Sequence[int], allowed: _Allowed
) -> tuple[tuple[Unit, ...], tuple[int, ...], bool]:
    """One unit per trajectory, with its ranking and whether any is restricted: the common case,
    built in bulk (unit ``u`` is trajectory ``u``)."""
    unpinned = {most: allowed((), most) for most in set(columns.need)}  # the common case: no pin
    pinned = max(pins, default=-1) >= 0
    if pinned:
        fits = [
            unpinned[most] if pin < 0 else allowed((pin,), most)
            for pin, most in zip(pins, columns.need, strict=True)
        ]
    else:  # the same look-ups, as one C-level pass
        fits = list(map(unpinned.__getitem__, columns.need))
    steps = columns.steps
    singles = zip(range(len(steps)))  # (i,) each
    # tuple.__new__(Unit, fields) is what Unit._make does, without a Python call per unit: a
    # constructor call per unit cost 1.5x ``_make``, ``_make`` ~1.4x this (4,096 x 32, ~1.4 ms)
    fields = zip(singles, steps, steps, columns.kv_steps, columns.prompts, fits, strict=True)
    units: list[Unit] = []
    for _ in range(0, len(steps), GIVE_UP_EVERY):  # 4 ms unchecked at 16,384 in one pass (deadline49)
        giveup.check()
        units.extend(map(_new_unit, itertools.islice(fields, GIVE_UP_EVERY)))
    giveup.check()
    ranked = tuple(_ranked(columns.step_array, columns.kv_array))
    active = allowed.active
    unrestricted = not pinned and all(len(f) == len(active) for f in unpinned.values())
    return tuple(units), ranked, unrestricted


_new_unit = functools.partial(tuple.__new__, Unit)  # a Unit of a tuple of its fields (``Unit._make``)


def _group_units(
    request: PlanRequest, columns: Columns, pins: Sequence[int], allowed: _Allowed
) -> tuple[Unit, ...]:
    """One unit per group (``prefix_affinity``), in order of each group's first member."""
    members: dict[str, list[int]] = {}
    for i, t in enumerate(request.trajectories):
        members.setdefault(t.group, []).append(i)
    prompts, steps, kv_steps, need = columns.prompts, columns.steps, columns.kv_steps, columns.need
    return tuple(
        Unit(
            members=tuple(idx),
            steps=max(steps[i] for i in idx),
            tokens=sum(steps[i] for i in idx),
            kv_steps=sum(kv_steps[i] for i in idx),
            prompt_tokens=sum(prompts[i] for i in idx),
            allowed=allowed(tuple(sorted({pins[i] for i in idx} - {-1})), max(need[i] for i in idx)),
        )
        for idx in members.values()
    )


def longest_first(units: Sequence[Unit]) -> list[int]:
    """Unit indices by decreasing steps, then decreasing KV-token-steps, ties in input order: the
    order every LPT pass places units in."""
    steps = np.fromiter((u.steps for u in units), dtype=np.int64, count=len(units))
    kv = np.fromiter((u.kv_steps for u in units), dtype=np.float64, count=len(units))
    return _ranked(steps, kv)


def _ranked(steps: npt.NDArray[np.int64], kv_steps: npt.NDArray[np.float64]) -> list[int]:
    """``longest_first`` on columns; lexsort is stable, so equal keys keep their input order."""
    order: list[int] = np.lexsort((-kv_steps, -steps)).tolist()
    return order


def worker_kinds(costs: Sequence[WorkerCost], active: Sequence[int]) -> list[list[int]]:
    """Active workers grouped into kinds: identical coefficients but for ``time_scale``, and scales
    within ``SPEED_TOLERANCE`` of the kind's fastest. Members fastest first (ties in inventory
    order), kinds in order of their first member in ``active``.

    Why a tolerance: the service learns each worker's speed (an EWMA of its actuals), so after the
    first steps no two workers share a scale and exact grouping made every worker its own kind;
    every aggregate decision (the band model, heaps per kind, the bound's cover) then grew with the
    pool. Kinds are what aggregate decisions see; a worker's own coefficients still set its
    estimates and its finish. With equal scales the kinds are exactly the identical-worker ones.
    """
    families: dict[tuple[float | int, ...], list[int]] = {}
    for w in active:
        c = costs[w]
        key = (*c.step_signature()[:-1], c.prefill_per_token_s, c.kv_capacity_tokens, c.max_num_seqs)
        families.setdefault(key, []).append(w)
    kinds: list[list[int]] = []
    for members in families.values():
        kinds.extend(speed_clusters([costs[w].time_scale for w in members], members, SPEED_TOLERANCE))
    position = {w: i for i, w in enumerate(active)}
    return sorted(kinds, key=lambda kind: min(position[w] for w in kind))

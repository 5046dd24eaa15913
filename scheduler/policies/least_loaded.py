"""``least_loaded``: a length-blind shared queue; each worker takes the next item when a slot frees.

This is what a pull-based dispatcher without predictions achieves (e.g. one global queue in front of
every engine). The plan carries it as ``Plan.dispatch_order`` (input order), which the sidecars and
the simulator play as a shared FIFO. It also carries static queues, each worker's share as the
shared queue would deal it, for consumers that need one queue per worker: a worker is modelled as
``lanes`` slots (its slot limit, or fewer when the KV cache holds fewer average sequences), each
taking the next item in input order when it frees, at the worker's saturated per-sequence speed;
lanes free at once go in turn across workers, as the shared queue deals (on exact lengths a batch
within the pool's slots is forecast exactly as it plays). Under prefix affinity a group goes whole
to one worker and runs on as many of its lanes (``_deal_groups``).
The lengths drive only this prediction of the dealing, never the order itself.
The plan's predicted finishes are those of the static queues; a replay of the shared FIFO
(``scheduler.simulator`` with ``dispatch_order``) can differ, since real slots free when real
sequences end.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable

from scheduler.costmodel import WorkerCost
from scheduler.policies.base import Placement
from scheduler.policies.problem import Problem, build_problem
from scheduler.types import PlanRequest


class LeastLoadedPolicy:
    """Shared FIFO in input order; static queues as the FIFO would deal them."""

    name = "least_loaded"

    def plan(self, request: PlanRequest, problem: Problem | None = None) -> Placement:
        """Dispatch in input order to whichever worker slot frees first."""
        problem = problem or build_problem(request)
        n = len(request.trajectories)
        lanes = worker_lanes(problem)
        if all(len(unit.members) == 1 for unit in problem.units):
            queues = deal_items(problem, lanes, range(len(problem.units)))
        else:
            queues = _deal_groups(problem, lanes)
        return Placement(
            queues=tuple(tuple(sorted(q)) for q in queues), status="HEURISTIC", dispatch_order=tuple(range(n))
        )


def worker_lanes(problem: Problem) -> dict[int, tuple[int, float]]:
    """Every active worker's ``_lanes`` at the batch's mean context (prompt plus half the decode).

    Summed per column: the terms are integers and halves, so the float total is exact and equals
    the per-trajectory sum, at a fraction of its cost (``lpt`` reads this on every plan)."""
    n = len(problem.steps)
    mean_context = (sum(problem.prompts) + sum(problem.steps) / 2.0) / n
    return {w: _lanes(problem.costs[w], mean_context) for w in problem.active}


def deal_items(
    problem: Problem, lanes: dict[int, tuple[int, float]], order: Iterable[int]
) -> list[list[int]]:
    """Units (single items) in ``order``, one at a time to the lane of an allowed worker that frees
    first; among lanes free at once, the least busy worker's (the lane's index counts a worker's busy
    lanes), as the shared queue deals: at the start every worker takes one item in turn, not the
    first worker as many as it has slots. Input order is the shared queue; longest first is
    ``scheduler.policies.waves``' candidate for queues that run in waves."""
    if problem.unrestricted:
        return _deal_anywhere(problem, lanes, order)
    pool = _Lanes(lanes)
    queues: list[list[int]] = [[] for _ in problem.costs]
    units = problem.units
    for u in order:
        unit = units[u]
        free_at, lane, w = pool.take(unit.allowed, len(problem.active))
        queues[w].extend(unit.members)
        pool.put((free_at + unit.tokens * lanes[w][1], lane, w))
    return queues


def _deal_anywhere(
    problem: Problem, lanes: dict[int, tuple[int, float]], order: Iterable[int]
) -> list[list[int]]:
    """``deal_items`` where every unit may take every active worker's lanes (``problem.unrestricted``):
    the lane ``_Lanes`` hands out is then always the earliest of all, ``(free at, lane, worker)``.
    Lanes not taken yet are free at 0 and come in (lane, worker) order, so they are generated in
    that order rather than kept in a heap; a lane taken goes on one heap, and each item takes the
    lesser of the next fresh lane and that heap's top: the same lanes, so the same queues.

    Why. ``_Lanes``' two levels (a heap per worker and one of their tops) are for items some workers
    may not take; for the service's batches, where none is pinned, they cost 6-10 ms of the
    length-blind plans at 4,096 x 32 (with quantiles least loaded is always dealt: ``blindbar``),
    spent before the at-once hedge could judge in the 80 ms default (docs/experiments.md, budget50)."""
    workers = sorted(lanes)
    deepest = max((slots for slots, _ in lanes.values()), default=0)
    fresh = ((0.0, k, w) for k in range(deepest) for w in workers if lanes[w][0] > k)
    ahead = next(fresh, None)
    taken: list[tuple[float, int, int]] = []
    per_token = {w: seconds for w, (_, seconds) in lanes.items()}
    queues: list[list[int]] = [[] for _ in problem.costs]
    units = problem.units
    for u in order:
        if ahead is not None and (not taken or ahead < taken[0]):
            free_at, lane, w = ahead
            ahead = next(fresh, None)
        else:
            free_at, lane, w = heapq.heappop(taken)
        unit = units[u]
        queues[w].extend(unit.members)
        heapq.heappush(taken, (free_at + unit.tokens * per_token[w], lane, w))
    return queues


def _deal_groups(problem: Problem, lanes: dict[int, tuple[int, float]]) -> list[list[int]]:
    """Prefix affinity: the worker that takes a group's first sample takes the whole group, whose
    samples then run side by side on as many of its lanes (``scheduler.sim_pool``'s shared queue).

    Each worker is a fluid of its lanes: the next group goes to the allowed worker that frees first,
    and keeps it busy for the group's tokens spread over its lanes. A group holding one lane, as
    single items do, would let one worker with hundreds of free lanes take the whole batch.
    """
    ready = dict.fromkeys(lanes, 0.0)  # when each worker's lanes would all be free again
    queues: list[list[int]] = [[] for _ in problem.costs]
    for unit in problem.units:  # input order of each group's first member
        w = min(unit.allowed, key=lambda v: (ready.get(v, math.inf), len(queues[v]), v))
        queues[w].extend(unit.members)
        slots, per_token = lanes[w]
        ready[w] += unit.tokens * per_token / slots
    return queues


def _lanes(cost: WorkerCost, mean_context: float) -> tuple[int, float]:
    """Concurrent sequences a worker sustains, and the seconds per token each then gets."""
    slots = max(1, min(cost.max_num_seqs, int(cost.kv_capacity_tokens // max(mean_context, 1.0))))
    return slots, cost.step_time(slots, slots * mean_context)


class _Lanes:
    """Every worker's lanes as ``(free at, lane, worker)``: a heap per worker, and one heap of each
    worker's earliest lane (entries go stale when that lane is taken; they are dropped when met).

    An item pinned to one worker of 64 x 256 lanes once popped and pushed back every other lane in
    one heap: 4,096 such items took 100 s of a 0.5 s budget. Now a restricted item looks at its
    allowed workers' earliest lanes, or skips at most one entry per other worker.
    """

    def __init__(self, lanes: dict[int, tuple[int, float]]) -> None:
        self.own = {w: [(0.0, k, w) for k in range(slots)] for w, (slots, _) in lanes.items()}
        self.tops = [heap[0] for heap in self.own.values()]
        heapq.heapify(self.tops)

    def take(self, allowed: tuple[int, ...], active: int) -> tuple[float, int, int]:
        """Pop the earliest-free lane of an allowed worker (ties: lane index, then worker)."""
        if 2 * len(allowed) <= active:
            w = min(allowed, key=lambda v: self.own[v][0])
        else:
            w = self._earliest(allowed, len(allowed) < active)
        lane = heapq.heappop(self.own[w])
        if self.own[w]:
            heapq.heappush(self.tops, self.own[w][0])
        return lane

    def put(self, lane: tuple[float, int, int]) -> None:
        """Give ``lane`` back to its worker, free at its new time."""
        heap = self.own[lane[2]]
        if not heap or lane < heap[0]:
            heapq.heappush(self.tops, lane)
        heapq.heappush(heap, lane)

    def _earliest(self, allowed: tuple[int, ...], restricted: bool) -> int:
        """The worker whose current earliest lane leads ``tops`` among ``allowed``; drops stale tops."""
        skipped: list[tuple[float, int, int]] = []
        while True:
            top = heapq.heappop(self.tops)
            heap = self.own[top[2]]
            if not heap or heap[0] != top:
                continue  # stale: that lane was taken since
            if restricted and top[2] not in allowed:
                skipped.append(top)
                continue
            for other in skipped:
                heapq.heappush(self.tops, other)
            return top[2]

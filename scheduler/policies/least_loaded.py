"""``least_loaded``: a length-blind shared queue; each worker takes the next item when a slot frees.

This is what a pull-based dispatcher without predictions achieves (e.g. one global queue in front of
every engine). The plan carries it as ``Plan.dispatch_order`` (input order), which the sidecars and
the simulator play as a shared FIFO. It also carries static queues, each worker's share as the
shared queue would deal it, for consumers that need one queue per worker: a worker is modelled as
``lanes`` slots (its slot limit, or fewer when the KV cache holds fewer average sequences), each
taking the next item in input order when it frees, at the worker's saturated per-sequence speed.
The lengths drive only this prediction of the dealing, never the order itself.
The plan's predicted finishes are those of the static queues; a replay of the shared FIFO
(``scheduler.simulator`` with ``dispatch_order``) can differ, since real slots free when real
sequences end.
"""

from __future__ import annotations

import heapq

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
        mean_context = sum(problem.prompts[i] + problem.steps[i] / 2.0 for i in range(n)) / n
        lanes: list[tuple[float, int, int]] = []  # (free at, worker, lane)
        per_token: dict[int, float] = {}
        for w in problem.active:
            slots, per_token[w] = _lanes(problem.costs[w], mean_context)
            lanes.extend((0.0, w, k) for k in range(slots))
        heapq.heapify(lanes)
        queues: list[list[int]] = [[] for _ in problem.costs]
        for unit in problem.units:  # input order of each unit's first member
            free_at, w, lane = _take(lanes, unit.allowed, len(problem.active))
            queues[w].extend(unit.members)
            busy = unit.tokens / len(unit.members) * per_token[w]  # a group's samples run side by side
            heapq.heappush(lanes, (free_at + busy, w, lane))
        return Placement(
            queues=tuple(tuple(sorted(q)) for q in queues), status="HEURISTIC", dispatch_order=tuple(range(n))
        )


def _lanes(cost: WorkerCost, mean_context: float) -> tuple[int, float]:
    """Concurrent sequences a worker sustains, and the seconds per token each then gets."""
    slots = max(1, min(cost.max_num_seqs, int(cost.kv_capacity_tokens // max(mean_context, 1.0))))
    return slots, cost.step_time(slots, slots * mean_context)


def _take(
    lanes: list[tuple[float, int, int]], allowed: tuple[int, ...], active: int
) -> tuple[float, int, int]:
    """Pop the earliest-free lane of an allowed worker (others are pushed back untouched)."""
    if len(allowed) == active:
        return heapq.heappop(lanes)
    skipped: list[tuple[float, int, int]] = []
    while True:
        lane = heapq.heappop(lanes)
        if lane[1] in allowed:
            for other in skipped:
                heapq.heappush(lanes, other)
            return lane
        skipped.append(lane)

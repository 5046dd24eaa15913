"""``lpt``: longest-predicted-first list scheduling, aware of worker speed and concurrency.

Units (trajectories, or groups under prefix affinity) are taken longest first and each goes to the
allowed worker whose load estimate (``scheduler.policies.load``) ends earliest once it is added: the
classic LPT rule for machines of different speed, with the speed of a continuous-batching worker
expressed through its decode-step cost, slot count and KV capacity rather than one number.

Workers with identical coefficients form a class; within a class the least-loaded worker is the one to
try, so each step costs one heap look-up per class instead of a scan over every worker, and 32k
trajectories on 256 workers place in tens of milliseconds.

Order inside a worker: ``scheduler.policies.ordering`` (longest first unless the KV cache binds).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from scheduler.costmodel import WorkerCost
from scheduler.policies.base import Placement
from scheduler.policies.load import Load, time_with
from scheduler.policies.ordering import order_queues
from scheduler.policies.problem import Problem, Unit, build_problem
from scheduler.types import PlanRequest


class LptPolicy:
    """Longest-predicted-first list scheduling onto the earliest-finishing allowed worker."""

    name = "lpt"

    def plan(self, request: PlanRequest, problem: Problem | None = None) -> Placement:
        """Place longest units first, then order each worker's queue for its makespan."""
        problem = problem or build_problem(request)
        assignment = lpt_assignment(problem)
        queues = order_queues(problem, assignment, request.kv_admission)
        return Placement(queues=queues, status="HEURISTIC")


def lpt_assignment(problem: Problem) -> list[list[int]]:
    """Unit indices per worker, chosen longest-first onto the earliest-finishing allowed worker."""
    costs = problem.costs
    loads = [Load() for _ in costs]
    placed: list[list[int]] = [[] for _ in costs]
    classes = _classes(costs, problem.active)
    heaps: list[list[tuple[float, int]]] = [[(0.0, w) for w in members] for members in classes]
    class_of = {w: c for c, members in enumerate(classes) for w in members}
    current = [0.0] * len(costs)
    sizes = [len(members) for members in classes]
    whole: dict[int, bool] = {}  # id(allowed) -> allowed is a union of whole classes (heap look-up is exact)
    order = sorted(range(len(problem.units)), key=lambda u: _longest_first(problem.units[u], u))
    for u in order:
        unit = problem.units[u]
        key = id(unit.allowed)
        if key not in whole:
            whole[key] = len(unit.allowed) > 8 and _is_union_of_classes(unit.allowed, class_of, sizes)
        worker = _best_worker(unit, costs, loads, heaps, class_of, current, whole[key])
        loads[worker].add(unit)
        placed[worker].append(u)
        current[worker] = time_with(costs[worker], loads[worker])
        heapq.heappush(heaps[class_of[worker]], (current[worker], worker))
    return placed


def _longest_first(unit: Unit, index: int) -> tuple[int, float, int]:
    return (-unit.steps, -unit.kv_steps, index)


def _classes(costs: Sequence[WorkerCost], active: Sequence[int]) -> list[list[int]]:
    """Active workers grouped by identical coefficients (everything but the id), inventory order."""
    groups: dict[tuple[float | int, ...], list[int]] = {}
    for w in active:
        c = costs[w]
        key = (
            c.mem_base_s,
            c.mem_per_token_s,
            c.flops_per_seq_s,
            c.flops_per_token_s,
            c.overhead_s,
            c.time_scale,
            c.prefill_per_token_s,
            c.kv_capacity_tokens,
            c.max_num_seqs,
        )
        groups.setdefault(key, []).append(w)
    return list(groups.values())


def _is_union_of_classes(allowed: Sequence[int], class_of: dict[int, int], sizes: Sequence[int]) -> bool:
    counts: dict[int, int] = {}
    for w in allowed:
        counts[class_of[w]] = counts.get(class_of[w], 0) + 1
    return all(sizes[c] == n for c, n in counts.items())


def _best_worker(
    unit: Unit,
    costs: Sequence[WorkerCost],
    loads: Sequence[Load],
    heaps: list[list[tuple[float, int]]],
    class_of: dict[int, int],
    current: Sequence[float],
    whole: bool,
) -> int:
    """The allowed worker whose estimate after adding ``unit`` is least (ties: lowest index)."""
    allowed = unit.allowed
    if not whole:
        return min(allowed, key=lambda w: (time_with(costs[w], loads[w], unit), w))
    best, best_key = -1, (float("inf"), 0)
    for c in sorted({class_of[w] for w in allowed}):
        heap = heaps[c]
        while heap[0][0] != current[heap[0][1]]:
            heapq.heappop(heap)
        w = heap[0][1]
        key = (time_with(costs[w], loads[w], unit), w)
        if key < best_key:
            best, best_key = w, key
    return best

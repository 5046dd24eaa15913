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
from collections.abc import Callable, Sequence

from scheduler.costmodel import WorkerCost
from scheduler.policies.base import Placement
from scheduler.policies.load import Load, estimate, rates
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
        queues, finishes = order_queues(problem, assignment, request.kv_admission)
        return Placement(queues=queues, status="HEURISTIC", finish_s=finishes)


def lpt_assignment(
    problem: Problem,
    tiers: Sequence[int] | None = None,
    band: Callable[[Unit], int] | None = None,
    scale: Sequence[float] | None = None,
) -> list[list[int]]:
    """Unit indices per worker, chosen longest-first onto the earliest-finishing allowed worker.

    With ``tiers`` (one per worker) and ``band`` (one per unit), a unit goes only to workers whose
    tier is at least its band, when any allowed worker qualifies: how ``cpsat`` confines the long
    tail to the workers its aggregate model chose. ``scale`` multiplies each worker's estimate (a
    measured simulated/estimated ratio). Without them this is plain LPT.
    """
    costs = problem.costs
    state = _State(problem, tiers or [0] * len(costs), scale or [1.0] * len(costs))
    order = sorted(range(len(problem.units)), key=lambda u: _longest_first(problem.units[u], u))
    for u in order:
        unit = problem.units[u]
        worker = state.best_worker(unit, band(unit) if band else 0)
        state.place(worker, u)
    return state.placed


def _longest_first(unit: Unit, index: int) -> tuple[int, float, int]:
    return (-unit.steps, -unit.kv_steps, index)


def worker_kinds(costs: Sequence[WorkerCost], active: Sequence[int]) -> list[list[int]]:
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


class _State:
    """Loads, placements and one heap per (kind, tier) of current load estimates."""

    def __init__(self, problem: Problem, tiers: Sequence[int], scale: Sequence[float]) -> None:
        self.costs, self.tiers, self.units, self.scale = problem.costs, tiers, problem.units, scale
        self.loads = [Load() for _ in self.costs]
        self.rates = [rates(c) for c in self.costs]
        self.placed: list[list[int]] = [[] for _ in self.costs]
        self.current = [0.0] * len(self.costs)
        self.kinds = worker_kinds(self.costs, problem.active)
        self.kind_of = {w: k for k, members in enumerate(self.kinds) for w in members}
        self.heaps: dict[tuple[int, int], list[tuple[float, int]]] = {}
        for k, members in enumerate(self.kinds):
            for w in members:
                self.heaps.setdefault((k, tiers[w]), []).append((0.0, w))
        self.groups = sorted(self.heaps)  # (kind, tier)
        # (id(allowed), band) -> the heaps to consult; [] when allowed is not made of whole kinds
        self.candidates: dict[tuple[int, int], list[list[tuple[float, int]]]] = {}

    def place(self, worker: int, u: int) -> None:
        """Put unit ``u`` on ``worker`` and refresh its estimate."""
        self.loads[worker].add(self.units[u])
        self.placed[worker].append(u)
        load = self.loads[worker]
        self.current[worker] = self.scale[worker] * estimate(
            self.rates[worker], load.steps, load.tokens, load.kv_steps, load.prompt_tokens
        )
        heapq.heappush(self.heaps[(self.kind_of[worker], self.tiers[worker])], (self.current[worker], worker))

    def best_worker(self, unit: Unit, band: int) -> int:
        """The allowed worker (tier >= band if any) whose estimate after adding ``unit`` is least."""
        key = (id(unit.allowed), band)
        heaps = self.candidates.get(key)
        if heaps is None:
            heaps = self.candidates[key] = self._candidate_heaps(unit.allowed, band)
        if not heaps:
            pool = [w for w in unit.allowed if self.tiers[w] >= band] or list(unit.allowed)
            return min(pool, key=lambda w: (self._after(w, unit), w))
        current = self.current
        tops = []
        for heap in heaps:
            while heap and heap[0][0] != current[heap[0][1]]:
                heapq.heappop(heap)
            if heap:
                tops.append(heap[0])
        if band == 0 and len(tops) > len(self.kinds):
            # Short units (the lowest band, half of them) change a worker's estimate by a sliver:
            # the least-loaded worker of each kind is the candidate, as in plain LPT.
            per_kind: dict[int, tuple[float, int]] = {}
            for top in tops:
                k = self.kind_of[top[1]]
                if k not in per_kind or top < per_kind[k]:
                    per_kind[k] = top
            tops = list(per_kind.values())
        if len(tops) == 1:
            return tops[0][1]
        return min((self._after(w, unit), w) for _, w in tops)[1]

    def _candidate_heaps(self, allowed: Sequence[int], band: int) -> list[list[tuple[float, int]]]:
        """The (kind, tier) heaps to look at for ``allowed`` at ``band``; empty: scan ``allowed``."""
        kinds = self._kinds_of(allowed)
        if kinds is None:
            return []
        groups = [g for g in self.groups if g[0] in kinds and g[1] >= band]
        groups = groups or [g for g in self.groups if g[0] in kinds]
        return [self.heaps[g] for g in groups]

    def _after(self, w: int, unit: Unit) -> float:
        load = self.loads[w]
        return self.scale[w] * estimate(
            self.rates[w],
            load.steps if load.steps > unit.steps else unit.steps,
            load.tokens + unit.tokens,
            load.kv_steps + unit.kv_steps,
            load.prompt_tokens + unit.prompt_tokens,
        )

    def _kinds_of(self, allowed: Sequence[int]) -> list[int] | None:
        """The kinds ``allowed`` consists of, when it is made of whole kinds and worth heap look-ups."""
        if len(allowed) <= 8:
            return None
        counts: dict[int, int] = {}
        for w in allowed:
            counts[self.kind_of[w]] = counts.get(self.kind_of[w], 0) + 1
        whole = all(len(self.kinds[k]) == n for k, n in counts.items())
        return sorted(counts) if whole else None

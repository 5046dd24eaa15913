"""The numeric view of a plan request that the length-aware policies share.

Policies place *units*: a single trajectory, or with ``prefix_affinity`` a whole group (its samples
share a prompt prefix, so they must land on one worker). Each unit carries the totals the load model
needs (decode tokens, KV-token-steps, prompt tokens, longest run) and the workers that may take it:
not excluded, the pinned worker when any sample is pinned, and a KV cache that holds every sample at
its generation cap. Built once per request in ``O(n)`` and then read by index, never re-derived.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.costmodel import WorkerCost, worker_cost
from scheduler.finish import worker_finish
from scheduler.stepsum import planned_steps
from scheduler.types import PlanRequest


@dataclass(frozen=True, slots=True)
class Unit:
    """Trajectories that must share a worker, with their summed load."""

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
    units: tuple[Unit, ...]  # placement units, input order of their first member
    active: tuple[int, ...]  # worker indices not excluded

    def finishes(self, queues: Sequence[Sequence[int]], reserve: bool) -> list[float]:
        """Predicted finish of every worker playing its ordered queue (``scheduler.finish``)."""
        prompts, steps = self.prompts, self.steps
        return [
            worker_finish(cost, [prompts[i] for i in queue], [steps[i] for i in queue], reserve)
            for cost, queue in zip(self.costs, queues, strict=True)
        ]


def build_problem(request: PlanRequest) -> Problem:
    """Resolve costs, planned lengths and units for ``request`` (assumed validated)."""
    workers = request.inventory.workers
    costs = tuple(worker_cost(w, request.inventory.model) for w in workers)
    index_of = {w.worker_id: i for i, w in enumerate(workers)}
    active = tuple(i for i, w in enumerate(workers) if w.worker_id not in request.excluded_workers)
    prompts = tuple(t.prompt_tokens for t in request.trajectories)
    steps = tuple(planned_steps(t.predicted_tokens) for t in request.trajectories)
    trajectories = request.trajectories
    need = [t.prompt_tokens + t.max_new_tokens for t in trajectories]
    kv_steps = [p * n + n * (n - 1) / 2.0 for p, n in zip(prompts, steps, strict=True)]
    pins = [-1 if t.pinned_worker is None else index_of[t.pinned_worker] for t in trajectories]
    capacities = sorted({c.kv_capacity_tokens for c in costs})
    cache: dict[tuple[tuple[int, ...], int], tuple[int, ...]] = {}

    def allowed(pinned: tuple[int, ...], most: int) -> tuple[int, ...]:
        key = (pinned, bisect.bisect_left(capacities, most))  # same key, same fitting workers
        if key not in cache:
            fit = tuple(
                w for w in (pinned or active) if w in active_set and costs[w].kv_capacity_tokens >= most
            )
            cache[key] = fit or active
        return cache[key]

    active_set = frozenset(active)
    units: list[Unit] = []
    if not request.prefix_affinity:
        for i in range(len(trajectories)):
            pin = () if pins[i] < 0 else (pins[i],)
            units.append(Unit((i,), steps[i], steps[i], kv_steps[i], prompts[i], allowed(pin, need[i])))
        return Problem(costs, prompts, steps, tuple(units), active)
    members: dict[str, list[int]] = {}
    for i, t in enumerate(trajectories):
        members.setdefault(t.group, []).append(i)
    for idx in members.values():
        pinned = tuple(sorted({pins[i] for i in idx} - {-1}))
        units.append(
            Unit(
                members=tuple(idx),
                steps=max(steps[i] for i in idx),
                tokens=sum(steps[i] for i in idx),
                kv_steps=sum(kv_steps[i] for i in idx),
                prompt_tokens=sum(prompts[i] for i in idx),
                allowed=allowed(pinned, max(need[i] for i in idx)),
            )
        )
    return Problem(costs, prompts, steps, tuple(units), active)

"""``round_robin``: today's RL-trainer default, an equal split of prompts across workers in input order.

Length-blind and speed-blind on purpose: it is the baseline every report compares against. Prompts
(GRPO groups) are dealt to the active workers in turn, so a group's samples share a worker exactly as
a trainer that hands each engine a slice of the prompt list would do. Constraints are still honoured,
because a baseline that breaks them would not be a plan: a pinned sample goes to its worker, and a
group the next worker cannot hold (KV capacity) goes to the next one in turn that can.
"""

from __future__ import annotations

from scheduler.policies.base import Placement
from scheduler.policies.problem import Problem, build_problem
from scheduler.types import PlanRequest


class RoundRobinPolicy:
    """Deal prompts to workers in turn; each queue keeps input order."""

    name = "round_robin"

    def plan(self, request: PlanRequest, problem: Problem | None = None) -> Placement:
        """Split the batch's prompts equally over the active workers, in input order."""
        problem = problem or build_problem(request)
        queues: list[list[int]] = [[] for _ in problem.costs]
        groups: dict[str, list[int]] = {}
        for index, trajectory in enumerate(request.trajectories):
            groups.setdefault(trajectory.group, []).append(index)
        active = problem.active
        if problem.unrestricted:
            # Every active worker may take every sample: each group goes to its turn's worker as it
            # is. ``lpt`` and ``cpsat`` deal this plan for their bar (``blindbar``) on every request,
            # and the per-sample look-ups below took most of its time there.
            for turn, members in enumerate(groups.values()):
                queues[active[turn % len(active)]].extend(members)
            return Placement(queues=tuple(tuple(sorted(q)) for q in queues), status="HEURISTIC")
        unit_of = {m: u for u, unit in enumerate(problem.units) for m in unit.members}
        for turn, members in enumerate(groups.values()):
            target = active[turn % len(active)]
            for index in members:
                allowed = problem.units[unit_of[index]].allowed
                queues[_next_allowed(target, allowed, active)].append(index)
        return Placement(queues=tuple(tuple(sorted(q)) for q in queues), status="HEURISTIC")


def _next_allowed(target: int, allowed: tuple[int, ...], active: tuple[int, ...]) -> int:
    """``target`` when allowed, else the next allowed worker after it in turn order."""
    if len(allowed) == len(active) or target in allowed:
        return target
    start = active.index(target)
    for step in range(1, len(active) + 1):
        candidate = active[(start + step) % len(active)]
        if candidate in allowed:
            return candidate
    return allowed[0]

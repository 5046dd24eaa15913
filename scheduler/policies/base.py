"""The policy interface: a name and a side-effect-free ``plan(request, problem) -> Placement``.

Policies decide only placement and order. Everything that every plan needs whatever its policy
(validation, the lower bound, predicted finish times, wall time) lives in ``scheduler.planner``, so a
new policy is one module implementing this protocol and one line in the registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from scheduler.policies.problem import Problem
from scheduler.types import PlanRequest


@dataclass(frozen=True, slots=True)
class Placement:
    """A policy's decision, by position: trajectory indices into ``request.trajectories``."""

    queues: tuple[tuple[int, ...], ...]  # one ordered queue per inventory worker, inventory order
    status: str = "HEURISTIC"  # how it was obtained: HEURISTIC, OPTIMAL, FEASIBLE, FALLBACK_LPT,
    # ROBUST_LPT, BASELINE (``scheduler.policies.blindbar``)
    dispatch_order: tuple[int, ...] = ()  # shared-queue policies: the one FIFO every worker pulls from
    finish_s: tuple[float, ...] = ()  # predicted finish per worker, when the policy already played it
    # through scheduler.finish (the planner then skips doing it again); empty otherwise
    at_once: str = ""  # what the at-once hedge did (``robust_fast``): "" not asked (no quantiles, one
    # kind, queues in waves), "kept" or "fastest" (judged), "unjudged" (asked, out of budget)


class BudgetSpent(Exception):  # noqa: N818 - a signal, not an error: the policy returns a plan
    """A search step passed its deadline before it could finish: the policy keeps its best so far.

    Raised only by steps given a deadline (a cpsat band round), so a step that cannot be cut short
    halfway (a placement, its ordering) gives the time back instead of running past the budget.
    """


class Policy(Protocol):
    """A placement policy, chosen by name."""

    name: str  # its key in the registry (``scheduler.policies``), reported as ``Plan.policy``

    def plan(self, request: PlanRequest, problem: Problem | None = None) -> Placement:
        """Place and order every trajectory of a validated ``request``; no I/O.

        ``problem`` is ``build_problem(request)`` when the caller already has it (the planner does).
        Called without the planner, on a trajectory no active worker may hold or a key held twice, it
        raises the validation's ``InvalidInputError`` naming that trajectory (``build_problem``,
        ``scheduler.policies.unholdable``); any other rule of ``scheduler.validation`` is the
        caller's to have checked.
        Deterministic on the frozen clock (``scheduler.clock``); on the wall clock a search policy cut
        short by ``request.time_budget_s`` returns what the host's speed let it reach.
        """
        ...

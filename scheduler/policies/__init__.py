"""Placement policies, one module each, chosen by name.

``round_robin`` and ``least_loaded`` are the length-blind baselines; ``lpt`` is speed- and
concurrency-aware list scheduling; ``cpsat`` improves on ``lpt`` with OR-Tools CP-SAT under a hard
time budget. ``scheduler.planner.plan`` is the entry point that runs one of them.
"""

from __future__ import annotations

from collections.abc import Callable

from scheduler.errors import UnknownNameError
from scheduler.policies.base import Placement, Policy
from scheduler.policies.cpsat import CpSatPolicy
from scheduler.policies.least_loaded import LeastLoadedPolicy
from scheduler.policies.lpt import LptPolicy
from scheduler.policies.round_robin import RoundRobinPolicy

_REGISTRY: dict[str, Callable[[], Policy]] = {
    "round_robin": RoundRobinPolicy,
    "least_loaded": LeastLoadedPolicy,
    "lpt": LptPolicy,
    "cpsat": CpSatPolicy,
}

POLICY_NAMES: tuple[str, ...] = tuple(_REGISTRY)


def get_policy(name: str) -> Policy:
    """The policy registered as ``name``; ``UnknownNameError`` (field ``policy``) otherwise."""
    if not isinstance(name, str) or name not in _REGISTRY:  # a list is unhashable: TypeError, unnamed
        raise UnknownNameError("policy", name, list(_REGISTRY))
    return _REGISTRY[name]()


__all__ = ["POLICY_NAMES", "Placement", "Policy", "get_policy"]

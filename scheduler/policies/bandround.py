"""One band round of cpsat: the band model's counts realised by list scheduling, then ordered.

Why a module of its own: to keep ``scheduler.policies.cpsat``, whose ``_rounds`` plays it once a
round (on the band model's counts, or on those ``scheduler.policies.lowband`` shifted), under ~400
lines; nothing else plays it.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler import clock
from scheduler.policies.base import BudgetSpent
from scheduler.policies.lpt import lpt_assignment
from scheduler.policies.ordering import order_queues, refine_critical
from scheduler.policies.problem import Problem

Played = tuple[list[list[int]], tuple[tuple[int, ...], ...], tuple[float, ...]]  # assignment, queues, ends


def play_round(
    problem: Problem,
    reserve: bool,
    tiers: Sequence[int],
    band: Sequence[int],
    scale: list[float] | None,
    cap_s: float | None,
    stop: float,
    deadline: float,
) -> Played | None:
    """One round of ``cpsat.CpSatPolicy._rounds``: the units placed in their bands' tiers (estimates times
    ``scale``, those past ``cap_s`` last), ordered, the last worker's queue refined; the assignment,
    queues and finishes, or None where placing and ordering would end past ``stop``."""
    try:
        banded = lpt_assignment(problem, tiers, band, scale, deadline=stop, cap_s=cap_s)
        if clock.now() > stop:  # placement checks its clock every listrun.CHECK_EVERY units
            return None  # and ordering's first pass is unchecked (~25 ms at 32,768): past ``stop``,
            # both together ended rounds up to ~10 ms past the budget
        queues, finishes = order_queues(problem, banded, reserve, deadline=stop)
    except BudgetSpent:
        return None
    queues, finishes = refine_critical(problem, queues, finishes, reserve, deadline)
    return banded, queues, finishes

"""One band round of cpsat: the band model's counts realised by list scheduling, then ordered.

Why a module of its own: to keep ``scheduler.policies.bandsearch``, whose ``rounds`` plays it once
a round (on the band model's counts, or on those ``scheduler.policies.lowband`` shifted), short and
about when rounds run; nothing else plays it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from scheduler import clock
from scheduler.policies.base import BudgetSpent
from scheduler.policies.lpt_assign import lpt_assignment
from scheduler.policies.ordering import Outdone, order_queues, refine_critical
from scheduler.policies.problem import Problem

Played = tuple[list[list[int]], tuple[tuple[int, ...], ...], tuple[float, ...]]  # assignment, queues, ends
# a round's scale, cap and scale past the slots (``calibrate.in_waves``), as played
Calibration = tuple[tuple[float, ...] | None, float | None, tuple[float, ...] | None]


@dataclass(slots=True)
class History:
    """What the rounds on one set of band counts have played: each round's calibration and placement.

    Why. On the same counts a round's plan is a function of its calibration (placement, ordering and
    refinement are deterministic; on a live clock they may only be cut short), and the next round's
    calibration a function of that plan. So a round whose calibration or placement repeats an earlier
    round's plays that round's plan again, which did not beat the best plan, and so does every round
    after it, calibrated by the same play: the sequence can stop there with the same plan. On the
    bench batches at 1,024 x 16 a round places every unit as an earlier one did on 8 of 15, as it often
    does under prefix affinity (its cap-shifted calls); at 4,096 x 32 and up none repeats
    (docs/experiments.md, Solver, 2026-12-05 "repeatstop").
    """

    calibrations: set[Calibration] = field(default_factory=set)
    placements: set[tuple[tuple[int, ...], ...]] = field(default_factory=set)

    def repeats_calibration(
        self, scale: Sequence[float] | None, cap_s: float | None, waves: Sequence[float] | None = None
    ) -> bool:
        """Whether a round was played with this scale, cap and ``waves`` (recording it when not)."""
        key = (None if scale is None else tuple(scale), cap_s, None if waves is None else tuple(waves))
        seen = key in self.calibrations
        self.calibrations.add(key)
        return seen

    def repeats_placement(self, banded: Sequence[Sequence[int]]) -> bool:
        """Whether a round placed every unit where ``banded`` does (recording it when not)."""
        key = tuple(tuple(units) for units in banded)
        seen = key in self.placements
        self.placements.add(key)
        return seen


def play_round(
    problem: Problem,
    reserve: bool,
    tiers: Sequence[int],
    band: Sequence[int],
    scale: list[float] | None,
    cap_s: float | None,
    stop: float,
    deadline: float,
    history: History | None = None,
    bar: float | None = None,
    waves: Sequence[float] | None = None,
) -> Played | None:
    """One round of ``bandsearch.rounds``: the units placed in their bands' tiers (estimates times
    ``scale``, or ``waves`` past a worker's slots; those past ``cap_s`` last), ordered, the last
    worker's queue refined; the assignment, queues and finishes, or None where no further round on
    these counts can give a new plan: placing and ordering would end past ``stop``, the round repeats
    one in ``history`` (``History``), or, with ``bar`` (the makespan to beat, given for the last
    round, whose play calibrates none after it), a queue that runs at once already ends at or past it
    (``ordering.Outdone``), so no play can win."""
    if history is not None and history.repeats_calibration(scale, cap_s, waves):
        return None
    try:
        banded = lpt_assignment(problem, tiers, band, scale, deadline=stop, cap_s=cap_s, waves=waves)
        if clock.now() > stop:  # placement checks its clock every listrun.CHECK_EVERY units
            return None  # and ordering's first pass is unchecked (~25 ms at 32,768): past ``stop``,
            # both together ended rounds up to ~10 ms past the budget
        if history is not None and history.repeats_placement(banded):
            return None
        queues, finishes = order_queues(problem, banded, reserve, deadline=stop, bar=bar)
    except (BudgetSpent, Outdone):
        return None
    queues, finishes = refine_critical(problem, queues, finishes, reserve, deadline)
    return banded, queues, finishes

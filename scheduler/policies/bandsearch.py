"""Step 2 of ``cpsat``: the band model of the tail, solved and realised by list scheduling in rounds.

Apart from the policy (``scheduler.policies.cpsat``) because this is the search's one step with a
state of its own: the band counts (``levels``), the rounds that realise them (each played once by
``bandround.play_round``, calibrated by the round before: ``calibrate``), when a round may start and
when the rounds stop, and the measured constants that decide it. The policy chooses between whole
plans (lpt's, these rounds', their copies, the repaired one, the robust and hedged ones) and calls
this for the rounds alone, on the whole batch or on one K-th of it (``cpsat._copy``). The line
falls where the plan stops being a set of band counts: what follows the rounds judges plans, whoever
found them.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler import clock
from scheduler.policies.bandround import History, play_round
from scheduler.policies.base import Placement
from scheduler.policies.calibrate import calibrate, in_waves, representative
from scheduler.policies.capband import CAP_LEFT, CAP_SHIFTS, cap_shifted
from scheduler.policies.levels import LevelPlan, bands_of, solve_levels
from scheduler.policies.lowband import low_shifted
from scheduler.policies.problem import Problem, worker_kinds
from scheduler.types import PlanRequest

LEVELS_SHARE = 0.15  # share of the remaining budget one aggregate solve may use
ROUND_FIXED_S = 0.02  # a round's aggregate solve: 5-60 ms (4,096 x 32 to 32,768 x 256)
ROUND_COST = 3.0  # plus at least 3x the lpt phase (tier-aware placement cannot take plain LPT's
# fast path). Since plain LPT got ~1.7x faster a round measures 3.9-7.2x the lpt phase at 4,096 x 32
# (since ``listrun``: round 1 3.0-3.3x, round 2 3.5-5.0x, wall clock, quiet host), 4.7-6.2x at
# 16,384 x 128 and 3.3-8.0x at 32,768 x 256 (5 batches each); kept at 3 because a round
# that runs long is cut short within the budget (ROUND_RESERVE), so starting one that may fit
# costs only wall time, never plan quality, and often pays.
ROUND_RESERVE = 0.03  # share of the budget a round leaves for what follows it. A round starts when it
# is expected to fit, and one that runs long is cut short here (``BudgetSpent``): it gives its time
# back and the plan still ends within the budget. A start margin instead (1.25x) kept most rounds at
# 32,768 x 256 from starting on a loaded host (the lpt plan, 1.21x the bound, against ~1.06x after a
# round).
AGREED = 0.01  # simulated within 1% of the estimate everywhere: no calibration needed
DEFER = 0.8  # the second round's cap on estimates: this share of the way from the band model's
# makespan to the first round's highest estimate. Units that would pass it wait until every other
# unit is placed (``lpt_assignment``'s ``cap_s``). 4,096 x 32 medians of the five bench batches,
# one round each way: 0.5: 1.136, 0.67: 1.096, 0.8: 1.029, 0.9: 1.032, none: 1.035; 16,384 x 128:
# 0.75: 1.034, 0.8: 1.035, 0.9: 1.039, none: 1.041 (below ~0.7 too many wait, and they crowd the
# lowest bands' workers, whose waves run 10% over their estimates).
ROUNDS = 2  # realisations of one aggregate solve: as planned, then calibrated and capped (``rounds``)
EXTRA_ROUNDS = 2  # more rounds, each calibrated by the last one's play, on point predictions alone
# (no quantiles, no affinity): 4,096 x 32 medians 1.0292 -> 1.0270 (docs/solver.md, step 4)
EXTRA_LEFT = 0.5  # an extra round starts only while this share of the budget is left (4,096 x 32:
# two rounds end at ~80 ms of 250 on a quiet host, an extra one costs ~35 ms there)


def rounds(
    problem: Problem,
    request: PlanRequest,
    best: Placement,
    assignment: list[list[int]],
    lpt_phase: float,
    deadline: float,
    solved: LevelPlan | None = None,
    more: int = 0,
) -> tuple[Placement, list[list[int]]]:
    """The band counts, realised by list scheduling in up to ``ROUNDS`` rounds, and ``more``
    after them while ``EXTRA_LEFT`` of the budget is left; the best plan so far (``best``, the
    lpt plan, to start) and its assignment.

    Round 1 places the units inside the chosen bands. Round 2 places them inside the same bands
    again, each (kind, band) group's estimates scaled by what round 1's simulation measured
    (``calibrate.calibrate``), and with the units that would pass a cap (``DEFER``) placed last. A round
    starts only when it is expected to fit the budget, and one that runs long is cut short.
    Each round past the second is calibrated and capped by the round before it, so a group
    that round 2 overloaded in its turn is planned slower again. The rounds stop where one
    repeats an earlier one (``bandround.History``), and the last is not ordered where a queue
    that runs at once already ends by the best plan's makespan: neither can change the plan.
    The counts are the band model's, solved here (with ``more``, on point predictions alone, a
    worker per ``lowband.PER_WORKERS`` moved up from its lowest band: ``low_shifted``), or ``solved``;
    under prefix affinity the model's own are followed by shifted ones (``cap_band_rounds``).
    """
    round_cost = ROUND_FIXED_S + ROUND_COST * lpt_phase  # re-does both, and solves
    if deadline - clock.now() < round_cost:
        return best, assignment  # a round would overrun the budget: keep the lpt plan
    kinds = worker_kinds(problem.costs, problem.active)
    levels = solved
    if levels is None:
        levels = solve(problem, kinds, max(best.finish_s), request, deadline)
        if levels is not None and more:  # point predictions alone, as the extra rounds: measured there
            levels = low_shifted(levels, problem, kinds)
    if levels is None:
        return best, assignment
    best, assignment = _realised(
        problem, request, levels, kinds, best, assignment, round_cost, deadline, more
    )
    if solved is None and request.prefix_affinity:
        return cap_band_rounds(problem, request, best, assignment, lpt_phase, deadline, levels)
    return best, assignment


def _realised(
    problem: Problem,
    request: PlanRequest,
    levels: LevelPlan,
    kinds: list[list[int]],
    best: Placement,
    assignment: list[list[int]],
    round_cost: float,
    deadline: float,
    more: int,
) -> tuple[Placement, list[list[int]]]:
    """``rounds``' rounds on ``levels``, from ``best`` (the best plan so far) and its ``assignment``,
    the first expected to take ``round_cost``: the best plan after them and its assignment."""
    tiers = levels.tiers(kinds, len(problem.costs))
    band = bands_of(problem.units, levels.edges)  # each unit's: the tiers it may go to
    stop = deadline - ROUND_RESERVE * request.time_budget_s
    scale: list[float] | None = None
    waves: list[float] | None = None
    cap_s: float | None = None
    last = ROUNDS + more
    history = History()
    for round_index in range(last):
        round_started = clock.now()
        if round_index and deadline - round_started < round_cost:
            break
        bar = max(best.finish_s) if round_index == last - 1 else None  # the last: beat it or stop
        played = play_round(
            problem, request.kv_admission, tiers, band, scale, cap_s, stop, deadline, history, bar, waves
        )
        if played is None:
            break  # past the budget, a repeat, or a last round that cannot win: keep the best so far
        banded, queues, finishes = played
        if max(finishes) < max(best.finish_s):
            best, assignment = Placement(queues, levels.status, finish_s=finishes), banded
        round_cost = max(round_cost, clock.now() - round_started)
        left = deadline - clock.now()
        if round_index == last - 1 or left < round_cost:
            break  # no further round can start: calibrating for it would only spend the budget
        if round_index >= ROUNDS - 1 and left < EXTRA_LEFT * request.time_budget_s:
            break  # an extra round polishes ~0.1%: only where it leaves the budget well alone
        scale, highest = calibrate(problem, banded, finishes, tiers, kinds)
        waves = in_waves(problem, banded, scale, tiers, kinds)
        cap_s = levels.makespan_s + DEFER * (highest - levels.makespan_s)
        if max(scale) <= 1.0 + AGREED and cap_s <= levels.makespan_s:
            break  # the worker model agreed and nothing would wait: round 2 would repeat round 1
    return best, assignment


def cap_band_rounds(
    problem: Problem,
    request: PlanRequest,
    best: Placement,
    assignment: list[list[int]],
    lpt_phase: float,
    deadline: float,
    levels: LevelPlan,
) -> tuple[Placement, list[list[int]]]:
    """Under prefix affinity, the rounds again on ``levels`` with more workers in the cap band
    (``capband.cap_shifted``, ``CAP_SHIFTS`` calls, each while ``CAP_LEFT`` of the budget is left);
    the best plan of all and its assignment.

    Why. The band model covers each band with fluid demand, but under affinity the cap band's
    units are whole groups (1.5-4.4e9 KV-token-steps at 4,096 x 32, up to 40% of what one H100
    serves there by the bound): the few workers the model put in that band cannot share them
    evenly and end ~10% past its makespan, while lower-band workers idle (docs/solver.md). More
    workers there spread the groups; the worker model judges each shift's rounds, and a shift
    that does not pay is not kept.
    """
    previous = levels
    for shift in range(1, CAP_SHIFTS + 1):
        if deadline - clock.now() < CAP_LEFT * request.time_budget_s:
            break
        shifted = cap_shifted(levels, shift)
        if shifted == previous:
            break  # the kind has no worker left below the cap band
        best, assignment = rounds(problem, request, best, assignment, lpt_phase, deadline, shifted)
        previous = shifted
    return best, assignment


def solve(
    problem: Problem,
    kinds: Sequence[Sequence[int]],
    upper_s: float,
    request: PlanRequest,
    deadline: float,
) -> LevelPlan | None:
    """Solve the aggregate model within its share of the remaining budget."""
    remaining = deadline - clock.now()
    if remaining <= 0 or len(problem.units) < 2:
        return None
    pairs = [(representative(problem.costs, members), len(members)) for members in kinds]
    return solve_levels(problem.units, pairs, upper_s, remaining * LEVELS_SHARE, request.seed)

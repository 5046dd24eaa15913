"""``lpt``: longest-predicted-first list scheduling, aware of worker speed and concurrency.

Units (trajectories, or groups under prefix affinity) are taken longest first and each goes to the
allowed worker whose load estimate (``scheduler.policies.load``) ends earliest once it is added: the
classic LPT rule for machines of different speed, with the speed of a continuous-batching worker
expressed through its decode-step cost, slot count and KV capacity rather than one number. The rule itself
is ``scheduler.policies.lpt_assign``'s; this module is the policy's flow around it.

Workers of one kind (``worker_kinds``: identical coefficients, time scales within a tolerance) form a
class; within a class the least-loaded worker is the one to try, its estimate on its own
coefficients, so each step costs one heap look-up per class instead of a scan over every worker, and
32k trajectories on 256 workers place in tens of milliseconds.

With tiers (``cpsat``'s realisation of its band counts) the general path keeps its state in
``scheduler.policies.listsched``. Order inside a worker: ``scheduler.policies.ordering`` (longest
first unless the KV cache binds), hedged for uncertain lengths by ``scheduler.policies.robust_order``.
With uncertain lengths on a pool of several device kinds the batch is then placed again, each
kind's estimates scaled by how late it runs on draws (``calibrated``, ``scheduler.policies.robust_place``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from scheduler import clock
from scheduler.giveup import stage
from scheduler.policies.base import Placement
from scheduler.policies.blindbar import Blind, barred, blind_plan, blind_start, drawn_blind_plan
from scheduler.policies.lpt_assign import lpt_assignment
from scheduler.policies.ordering import order_queues, refine_critical
from scheduler.policies.problem import Problem, build_problem, worker_kinds
from scheduler.policies.robust import Spread, spreads
from scheduler.policies.robust_fast import JUDGED, UNJUDGED, Candidate, at_once_judged
from scheduler.policies.robust_order import hedged, trajectories_in_waves
from scheduler.policies.robust_place import kind_scales, plays_unusable
from scheduler.policies.waves import lane_assignment
from scheduler.types import PlanRequest

SCREEN_MARGIN = 1.05  # a lane-dealt start whose queues, each played once in its default order, end
# later than this times the ordered LPT plan is not ordered too: ordering gains a few percent, and the
# long chain-of-thought replay (queues past their slots, lengths far from equal) built it for every
# plan and never kept it, at 0.4 s a plan
REPLAY_PLAYS = 6  # plays of every queue that placing again costs: four candidate orders, then the
# hedge's two (``calibrated`` starts only if that many still fit, timed by the draws' plays)
PLACE_COST = 2.0  # lpt phases placing again takes: scaled estimates take the general list-scheduling
# path (``ListState``), 1.7-1.9 lpt phases at 4,096 x 32 and 16,384 x 128, 70-80 ms of a 1 s plan there


class LptPolicy:
    """Longest-predicted-first list scheduling onto the earliest-finishing allowed worker."""

    name = "lpt"

    def plan(self, request: PlanRequest, problem: Problem | None = None) -> Placement:
        """Place longest units first, then order each worker's queue for its makespan."""
        problem, deadline, spread, phase, waves, blind, assignment, placement = opening(
            request, problem, "HEURISTIC"
        )
        with stage("hedge"):
            lpt_hedged = hedged(problem, request, placement, spread, deadline, phase, waves)
        late = settled(problem, request, lpt_hedged, spread, deadline, phase, waves)
        first = placed_from(lpt_hedged, late.placed, late.final)
        blind = bar_plans(problem, request, blind, assignment, spread, deadline, phase)
        with stage("bar"):
            return barred(problem, request, late.final, blind, "HEURISTIC", spread, deadline, first, phase)


class Settled(NamedTuple):
    """lpt's plan after its late stages (``settled``)."""

    placed: Placement  # placed again by kind (``calibrated``), or the hedged plan where it was not
    final: Placement  # at-once judged (``robust_fast``): ``placed`` or the fastest-kind-first plan
    candidate: Candidate | None  # that judgment's candidate, for judging another plan of the batch
    judging_s: float  # what the at-once judgments took


def settled(
    problem: Problem,
    request: PlanRequest,
    lpt_hedged: Placement,
    spread: Spread | None,
    deadline: float,
    phase: float,
    waves: int = 0,
) -> Settled:
    """``lpt_hedged`` placed again by kind and at-once judged, the judgment first: the hedged plan is
    judged, then placed again where that fits, and the plan placed again weighed against the same
    candidate, its own side alone played (``robust_fast.at_once_judged``); where that last judgment
    runs out of time, what the first judgment chose stands, the candidate or the hedged plan it
    kept: a plan the judgment had no time for never replaces one it judged, the rule ``cpsat``'s
    ``_stands`` holds a searched plan to (review50a).

    Why the judgment first. It weighs the plan against a candidate that does not depend on placing
    again, and under the service's 80 ms default placing again (5-39 ms) would take its time: placed
    again first, the judgment fitted in 0 of 5 to 6 of 11 plans at 1,024 x 16 (budget49), where the
    candidate runs 1.89x the bound over draws and lpt's plan 2.5-2.74x. Placing again still runs
    where the candidate won: it can make lpt's plan beat it (two kinds near in speed, review49a). The
    first judgment's choice stands over an unjudged second: the plan placed again would go out
    ``unjudged``, weighed against the candidate on no draw though a plan of the same batch was, and
    its answer would say its at-once risk was not checked where it had been (mutants13). Placing
    again bets on plain draws of the lengths, which cannot see the outliers at-once risk is about."""
    started = clock.now()
    with stage("at-once hedge"):
        first = at_once_judged(problem, request, lpt_hedged, spread, deadline, phase)
    judging_s = clock.now() - started
    with stage("placing again"):
        placed = calibrated(problem, request, lpt_hedged, spread, deadline, phase, waves)
    if placed is lpt_hedged:
        return Settled(placed, first.placement, first.candidate, judging_s)
    started = clock.now()
    with stage("at-once hedge"):
        again = at_once_judged(problem, request, placed, spread, deadline, phase, first.candidate)
    judging_s += clock.now() - started
    if again.placement.at_once == UNJUDGED and first.placement.at_once in JUDGED:
        return Settled(placed, first.placement, first.candidate, judging_s)
    return Settled(placed, again.placement, again.candidate or first.candidate, judging_s)


class Opening(NamedTuple):
    """Where ``lpt`` and ``cpsat`` both start (``opening``)."""

    problem: Problem  # the request's, built here when the caller had none
    deadline: float  # the policy's start on ``scheduler.clock`` plus ``request.time_budget_s``
    spread: Spread | None  # the request's quantiles (``robust.spreads``); None: point predictions only
    phase_s: float  # what ``lpt_start`` took: the unit the later phases price their fixed costs in
    waves: int  # trajectories the lpt start left in waves (with quantiles): ``robust_order.judge_item_s``;
    # 0 where the lpt start ended past the deadline, where every hedge returns before pricing
    blind: Blind | None  # the better length-blind plan, for the bar at the end (``blindbar.barred``);
    # None with quantiles, where the bar builds them (``bar_plans``)
    assignment: list[list[int]]  # units per worker of ``placement``
    placement: Placement  # the lpt start, or the blind plan where it starts sooner (``blind_start``)


def opening(request: PlanRequest, problem: Problem | None, status: str) -> Opening:
    """The lpt start, the length-blind plans (without quantiles: with them ``bar_plans`` builds them
    for the bar) and the budget's unit, as both ``lpt`` and ``cpsat`` begin; ``placement`` carries
    ``status``.

    One function for both: ``cpsat`` searches from the very plan ``lpt`` starts from, keeps it as its
    fallback (``FALLBACK_LPT``) and prices its steps in the same phase; two copies of these lines
    could drift apart, and that fallback would no longer be lpt's.
    """
    started = clock.now()
    deadline = started + request.time_budget_s
    problem = problem or build_problem(request)
    with stage("spreads"):
        spread = spreads(request.trajectories)
    with stage("lpt start"):
        start = lpt_start(problem, request.kv_admission, deadline, spread is None)
    phase = clock.now() - started
    waves = 0  # past the deadline no hedge prices a plan (``robust_orders``): its count, 1-2.4 ms, unread
    if spread is not None and clock.now() < deadline:
        waves = trajectories_in_waves(problem, start[1], request.kv_admission)
    blind = None
    if spread is None:  # with quantiles they are only the bar's: built there (``bar_plans``)
        with stage("blind plans"):
            blind = blind_plan(problem, request, start[0], lpt_bar(start[2], spread), deadline)
    assignment, queues, finishes = blind_start(problem, blind, start, spread is not None)
    placement = Placement(queues=queues, status=status, finish_s=finishes)
    return Opening(problem, deadline, spread, phase, waves, blind, assignment, placement)


def bar_plans(
    problem: Problem,
    request: PlanRequest,
    blind: Blind | None,
    assignment: Sequence[Sequence[int]],
    spread: Spread | None,
    deadline: float,
    phase_s: float = 0.0,
) -> Blind | None:
    """The length-blind plans the bar (``blindbar.barred``) holds the plan to: ``blind``, the
    opening's, without quantiles; with them, built now from the lpt start's ``assignment``
    (``drawn_blind_plan``: None where they and the bar's draws would not fit before ``deadline``).

    Why here. With quantiles they are neither the start (``blind_start``) nor read before the bar,
    and at 4,096 x 32 building them (6-11 ms on a quiet host) before the at-once hedge leaves it
    unjudged in every plan of the service's 80 ms default (docs/experiments.md, budget50). Past the
    deadline the bar returns the plan whether or not they were built."""
    if spread is None:
        return blind
    with stage("blind plans"):
        return drawn_blind_plan(problem, request, assignment, deadline, phase_s, spread)


def lpt_bar(finishes: Sequence[float], spread: Spread | None) -> float:
    """What the plan ``lpt`` or ``cpsat`` returns is known not to exceed on the predictions, from the
    lpt start's ``finishes``: their makespan without quantiles (every later step only lowers it),
    none with them (hedging and placing again by kind trade point finish for draws)."""
    return max(finishes, default=0.0) if spread is None else float("inf")


def calibrated(
    problem: Problem,
    request: PlanRequest,
    placement: Placement,
    spread: Spread | None,
    deadline: float,
    lpt_phase_s: float = 0.0,
    lpt_waves: int = 0,
) -> Placement:
    """``placement`` (hedged) placed again by LPT with each device kind's estimates scaled by how
    late that kind runs on draws of the lengths against those estimates (drawn over estimate, so
    that scaled estimate is the drawn finish: ``scheduler.policies.robust_place``), then ordered
    and hedged; ``placement`` itself without quantiles, with one kind, when the kinds agree, or when
    the new plan would not be hedged before ``deadline`` (an unhedged plan is never returned).

    What it costs is projected before each part starts: placing again (``PLACE_COST`` lpt phases
    of ``lpt_phase_s`` seconds, the time ``lpt_start`` took) before the draws, and with the draws'
    pace, ``REPLAY_PLAYS`` plays of every queue too before placing. Both are priced because placing
    again takes 70-80 ms of a 1 s plan at 16,384 x 128 (idle host): with the plays alone priced, a
    loaded host placed a plan that could not be hedged in time and dropped it, 445 ms that ended
    the plan 45 ms past its budget with the search never started."""
    if spread is None or len(worker_kinds(problem.costs, problem.active)) < 2:
        return placement
    started = clock.now()
    placing_s = PLACE_COST * lpt_phase_s
    if started + placing_s > deadline:  # the draws would be played for nothing
        return placement
    scale = kind_scales(
        problem, placement, spread, request.kv_admission, request.seed, deadline - placing_s, REPLAY_PLAYS
    )
    if scale is None or plays_unusable(started, clock.now(), 0.0, deadline - placing_s, REPLAY_PLAYS):
        return placement
    queues, finishes = ordered(
        problem, lpt_assignment(problem, scale=scale), request.kv_admission, deadline, False
    )
    again = Placement(queues, placement.status, finish_s=finishes)
    settled = hedged(problem, request, again, spread, deadline, lpt_phase_s, lpt_waves)
    return placement if settled is again else settled


def placed_from(first: Placement, placed: Placement, final: Placement) -> Placement | None:
    """``first``, the plan ``calibrated`` started from, where the bar may give it back
    (``blindbar.barred``): only where the at-once hedge kept the plan placed again (``final`` is
    ``placed``); None otherwise. Where placing again changed nothing, ``barred`` itself finds
    ``first`` equal to the plan it judges and leaves it.

    Why only then. The bar's rescue of ``first`` exists to undo a placing again it rejects. Given a plan
    the at-once hedge chose, it would undo that hedge, on plain draws that cannot see what the hedge
    judged: on a small pool (2 H100 + 1 A100, short-cot, 128 samples) the lpt start put 124 of them on
    the A100 behind four long predictions on the H100s, the at-once hedge moved them to the H100s (the
    outlier draws rate the A100 pile far later), and on the plain draws the three plans differ by
    sampling noise, so the request's seed chose: 8 seeds of 16 got the pile back (25.3 s on the true
    lengths against 16.0 s)."""
    return first if final.queues == placed.queues else None


def lpt_start(
    problem: Problem, reserve: bool, deadline: float, refine: bool
) -> tuple[list[list[int]], tuple[tuple[int, ...], ...], tuple[float, ...]]:
    """The plan both ``lpt`` and ``cpsat`` start from: its assignment, ordered queues and finishes.

    The LPT assignment, ordered; where it runs in waves, also the units dealt onto lanes
    (``scheduler.policies.waves``), ordered the same way, and the one the worker model finishes
    sooner (ties: LPT's). LPT's estimate counts a second wave as a fraction of one: with equal
    predictions it planned slower than the length-blind baselines. The candidate is skipped once
    ``deadline`` has passed, and not ordered where one play of each queue already ends past
    ``SCREEN_MARGIN`` times LPT's; it is ``cpsat``'s hint, fallback and bar when it wins."""
    assignment = lpt_assignment(problem)
    queues, finishes = ordered(problem, assignment, reserve, deadline, refine)
    if clock.now() > deadline:
        return assignment, queues, finishes
    dealt = lane_assignment(problem, assignment)
    if dealt is None:
        return assignment, queues, finishes
    _, screened = order_queues(problem, dealt, reserve, search_until=float("-inf"))  # one play each
    if max(screened, default=0.0) > SCREEN_MARGIN * max(finishes, default=0.0):
        return assignment, queues, finishes
    dealt_queues, dealt_finishes = ordered(problem, dealt, reserve, deadline, refine)
    if max(dealt_finishes, default=0.0) < max(finishes, default=0.0):
        return dealt, dealt_queues, dealt_finishes
    return assignment, queues, finishes


def ordered(
    problem: Problem, assignment: Sequence[Sequence[int]], reserve: bool, deadline: float, refine: bool
) -> tuple[tuple[tuple[int, ...], ...], tuple[float, ...]]:
    """``assignment``'s queues in their fastest candidate orders on the predictions, and their finishes.

    With ``refine`` the last worker gets the wider search (``refine_critical``). Not where the
    request says how unsure the predictions are: that search bets on the point predictions (the
    worker it refines is rarely the one that ends last in truth: docs/experiments.md, Solver, "Order:
    the critical worker"), and the hedge
    (``scheduler.policies.robust_order``) judges the orders on draws instead, in the time it saves.
    """
    queues, finishes = order_queues(problem, assignment, reserve, search_until=deadline)
    if refine:
        queues, finishes = refine_critical(problem, queues, finishes, reserve, deadline)
    return queues, finishes

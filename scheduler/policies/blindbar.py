"""The length-blind plans as a bar: ``lpt`` and ``cpsat`` never plan slower than they do.

Why. ``round_robin`` and ``least_loaded`` ignore the predictions, so a length-aware plan that the
worker model (``scheduler.finish``) finishes later than theirs, on the very predictions it planned
with, is a defect a user sees at once. It happened on small mixed pools with learned speeds (one
H100, one Ascend 910B, one A100, tens of samples a prompt): LPT's estimate counts a queue past its
slots as a fraction of a wave, and with quantiles the batch is placed again by kind on that same
estimate (``lpt.calibrated``) and hedged, each step trading point finish for draws without a floor.
With every prediction equal (a run's first step) the plan placed again put 281 items on the
128-slot Ascend and planned 6.22 s against round robin's 4.43 s; 20 of 48 small random batches
planned later than round robin (up to 1.28x), and on the draws too most of them ran later.

How. ``blind_plan`` builds round robin's queues, and least loaded's where some queue of the lpt
start holds more items than its worker's lanes (the regime where dealing whole waves beats LPT's
estimate; the dealing costs about an lpt phase, so without quantiles and past ``SMALL`` trajectories
it is not built where every queue runs within its lanes, as at every ``bench solver`` size; with
quantiles it always is, since the batch is placed again after the start). Each is played through
the worker model exactly as the planner reports that policy, unless its load estimate
(``scheduler.policies.load``), taken down by ``KV_FILL`` to a lower bound of the worker model,
already reaches ``bar_s``. The better one is kept, each worker's queue in its own order or in the
ordering's fastest (``scheduler.policies.ordering``), whichever finishes sooner. The policies take
it as their start when it beats the lpt start (``blind_start``), and return it at the end
(``barred``) when the plan they would return finishes later on the predictions (with quantiles,
only where it is also expected to end sooner on the request's draws of the lengths). With
quantiles a plan earlier on the predictions is judged on the draws too, against every blind plan
built (``Blind.drawn``), where its single drawn items alone outlast its predicted makespan
(``scheduler.policies.blind_draws``): the short-cot replay's lpt plans, 30% EARLIER than round
robin's on the predictions, were 0.62x round robin on the true lengths, and on the draws too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from scheduler import clock, giveup
from scheduler.policies.base import BudgetSpent, Placement
from scheduler.policies.blind_draws import least_drawn, outlived
from scheduler.policies.least_loaded import LeastLoadedPolicy, worker_lanes
from scheduler.policies.load import KV_FILL, estimate, rates
from scheduler.policies.ordering import order_queues
from scheduler.policies.plan_draws import priced
from scheduler.policies.problem import Problem
from scheduler.policies.robust import SAMPLES, Spread, least_expected
from scheduler.policies.round_robin import RoundRobinPolicy
from scheduler.types import PlanRequest

Queues = tuple[tuple[int, ...], ...]
SMALL = 512  # trajectories up to which least loaded's plan is always a candidate: within its lanes
# too it can end a few microseconds before LPT's (a few equal items, prefill placed differently);
# dealing it costs about an lpt phase, so larger batches within their lanes (every ``bench solver``
# size) build it only as the module doc says, and are held to round robin's plan alone

DRAWS_COST = 1.0  # lpt phases the bar's draws take before their pace is known, none in hand:
# ``SAMPLES`` drawn and ``outlived``'s first ``CHUNK`` played, 0.8-1.24 lpt starts at 1,024 x 16 and
# 4,096 x 32 (5-8 ms there); unpriced, they ended plans 3-7 ms past the service's 80 ms (review50a);
# of them ``plan_draws.DRAWING`` is charged only for the rows still to draw (``draws_price``); the
# first chunk's play, 0.47-0.62 lpt phases there, in any case (docs/experiments.md, draws52)
BLIND_COST = 1.0  # lpt phases the blind plans take to build with quantiles (round robin's and least
# loaded's, each played): 0.5-1.0 at 4,096 x 32, 0.25-0.9 at 1,024 x 16 (review50a)


@dataclass(frozen=True, slots=True)
class Blind:
    """The better length-blind plan, ordered, and its finishes on the predictions."""

    queues: Queues
    finish_s: tuple[float, ...]
    drawn: tuple[tuple[Queues, tuple[float, ...]], ...] = ()  # with quantiles: every blind plan
    # built (round robin's, least loaded's), each with its finishes, for the bar on the draws

    @property
    def makespan_s(self) -> float:
        """The plan's predicted makespan."""
        return max(self.finish_s, default=0.0)


def blind_plan(
    problem: Problem,
    request: PlanRequest,
    assignment: Sequence[Sequence[int]],
    bar_s: float,
    deadline: float,
) -> Blind | None:
    """The faster of round robin's and least loaded's plans (module doc) when it finishes before
    ``bar_s`` on the predictions; None otherwise, or once ``deadline`` has passed.

    ``assignment`` is the lpt start's (units per worker): without quantiles least loaded is built
    only where one of its queues holds more units than its worker's lanes. ``bar_s`` is what the
    plan to be returned is known not to exceed (``lpt.lpt_bar``: the lpt start's makespan without
    quantiles; infinity with them, since hedging and placing again by kind may raise it).

    The plan kept is ordered for the predictions only without quantiles and without prefix affinity
    (the ordering takes units, and under affinity a queue is groups): with quantiles the plan it
    bars has its orders hedged on draws, which gives up point finish on purpose, and a bar of
    point-best orders undid the hedge on a single worker; the bar is then the length-blind plans
    as those policies report them, which is what is promised.

    Nothing is built once ``deadline`` has passed: round robin's queues were dealt and then
    dropped at the first check, 50-160 ms at 4,096 x 32 on a starved host (docs/experiments.md,
    budget47)."""
    if clock.now() > deadline:
        return None
    reserve = request.kv_admission
    unbound = bar_s == float("inf")
    best: tuple[Queues, list[float]] | None = None
    built: list[tuple[Queues, tuple[float, ...]]] = []
    for queues in _candidates(problem, request, assignment, unbound, deadline):
        giveup.check()
        if clock.now() > deadline:
            return None
        if _floor(problem, queues) >= bar_s:
            continue
        finishes = problem.finishes(queues, reserve)
        built.append((queues, tuple(finishes)))
        if max(finishes, default=0.0) < bar_s:
            best, bar_s = (queues, finishes), max(finishes, default=0.0)
    if best is None:
        return None
    queues, finishes = best
    if unbound:
        return Blind(queues, tuple(finishes), tuple(built))  # see the docstring
    if len(problem.units) != len(problem.steps):
        return Blind(queues, tuple(finishes))  # see the docstring
    ordered, ordered_finishes = order_queues(problem, queues, reserve, search_until=deadline)
    chosen = [
        (o, g) if g < f else (q, f)
        for q, f, o, g in zip(queues, finishes, ordered, ordered_finishes, strict=True)
    ]
    return Blind(tuple(q for q, _ in chosen), tuple(f for _, f in chosen))


def drawn_blind_plan(
    problem: Problem,
    request: PlanRequest,
    assignment: Sequence[Sequence[int]],
    deadline: float,
    phase_s: float,
    spread: Spread,
) -> Blind | None:
    """``blind_plan`` for the bar on the draws (with quantiles), built only where it and then the
    bar's draws fit before ``deadline`` (``BLIND_COST`` lpt phases of ``phase_s``, the lpt start's
    time, and ``draws_price``); None otherwise, and the bar keeps the plan.

    Why. With quantiles the blind plans serve only the bar's draws: without time for those, the
    bar keeps the plan whether or not they were built (``_bar``). Built unpriced after the at-once
    hedge (``lpt.bar_plans``), they took 7-22 ms at 4,096 x 32 (load 4) and ended 9 of 20 plans of
    the service's 80 ms past it, up to 9.9 ms, some built and then dropped (review50a)."""
    drawn_by = deadline - draws_price(problem, spread, request.seed, phase_s)  # the bar's draws start by then
    if clock.now() + BLIND_COST * phase_s >= drawn_by:
        return None
    return blind_plan(problem, request, assignment, float("inf"), drawn_by)


def blind_start(
    problem: Problem,
    blind: Blind | None,
    start: tuple[list[list[int]], Queues, tuple[float, ...]],
    unbound: bool,
) -> tuple[list[list[int]], Queues, tuple[float, ...]]:
    """``start`` (the lpt start: units per worker, ordered queues, finishes), or ``blind`` as the
    start when it finishes sooner: what ``cpsat`` searches from and must beat. Not under prefix
    affinity (units are groups there, and the start's assignment is by unit), nor with quantiles
    (``unbound``): the start is then hedged and placed again by kind on draws, which is what sets
    the plan there; the bar at the end (``barred``) still holds it to the blind plans."""
    if blind is None or unbound or len(problem.units) != len(problem.steps):
        return start
    if blind.makespan_s >= max(start[2], default=0.0):
        return start
    return [list(q) for q in blind.queues], blind.queues, blind.finish_s


def barred(
    problem: Problem,
    request: PlanRequest,
    placement: Placement,
    blind: Blind | None,
    status: str,
    spread: Spread | None,
    deadline: float,
    first: Placement | None = None,
    phase_s: float = 0.0,
) -> Placement:
    """``_bar``'s plan; where that is a blind plan and ``placement`` was placed again from ``first``
    (``lpt.calibrated``), ``first`` where it ends sooner than that blind plan on the same draws.

    Why. Placing again trades point finish for draws by kind and is not judged against the plan it
    came from (docs/solver.md, step 9); where the bar then finds it later than a blind plan, that
    plan it came from was never asked. Live, with learned speeds splitting 8 workers into 5 kinds,
    the lpt start ended at 0.842 s on the predictions, placed again at 1.080 s, and the bar
    returned round robin's at 1.378 s (bound 0.811 s); on 64 draws the three ran 3.687, 3.902 and
    3.921 s (docs/experiments.md, bughunt8).

    ``phase_s``, the lpt start's time, prices the draws (``draws_price``, ``_bar``): where they would
    not fit before ``deadline``, no draw is drawn and the bar's verdict stands."""
    chosen = _bar(problem, request, placement, blind, status, spread, deadline, phase_s)
    if first is None or spread is None or chosen is placement or first.queues == placement.queues:
        return _reported(chosen, placement)
    if clock.now() + draws_price(problem, spread, request.seed, phase_s) >= deadline:  # no time for them
        return _reported(chosen, placement)
    draws = problem.draws(spread, request.seed).rows(SAMPLES)  # the plan's (``Problem.draws``)
    points = first.finish_s or tuple(problem.finishes(first.queues, request.kv_admission))
    best = least_drawn(problem, first.queues, points, [chosen.queues], draws, request.kv_admission, deadline)
    return _reported(first if best == 0 else chosen, placement)


def draws_price(problem: Problem, spread: Spread, seed: int, phase_s: float) -> float:
    """Seconds the bar's draws take before their pace is known: ``DRAWS_COST`` lpt phases of
    ``phase_s``, less the drawing of the rows the plan already holds (``plan_draws.priced``).

    Why. The plan's draws are drawn once and shared (``scheduler.policies.plan_draws``): where the
    at-once hedge, cpsat's baseline or the bar's own screen drew some or all of them, the bar draws
    only the rest, and charging it the whole drawing kept it from its draws in plans that had the
    time for what was left. The first chunk's play is charged in hand or not."""
    return priced(DRAWS_COST, problem.draws(spread, seed), SAMPLES, phase_s)


def _reported(chosen: Placement, judged: Placement) -> Placement:
    """``chosen`` saying what the at-once hedge did on the plan the bar was given (``judged``): the
    report tells whether the hedge judged, whichever plan the bar returns."""
    return chosen if chosen.at_once == judged.at_once else replace(chosen, at_once=judged.at_once)


def _bar(
    problem: Problem,
    request: PlanRequest,
    placement: Placement,
    blind: Blind | None,
    status: str,
    spread: Spread | None,
    deadline: float,
    phase_s: float = 0.0,
) -> Placement:
    """``placement``, or a blind plan with ``status`` where ``placement`` ends later: on the
    predictions without quantiles; with them, on the request's draws of the lengths.

    With ``spread`` (the request's quantiles) the predictions are not what the plan was chosen on:
    its orders were hedged and its placement judged on draws (``robust_order``, ``robust``), giving
    up point finish on purpose. So there each queue first counts at the lower of its hedged order's
    and its fastest order's finish (on one worker, where every plan holds the same items, a bar on
    the hedged orders undid the hedge), and a plan still later than ``blind`` on the predictions is
    replaced only where ``blind`` is also expected to end sooner on the request's draws
    (``robust.least_expected``; ties, and no time left to play them, keep the plan). Judged on the
    predictions alone, the bar replaced the headline's step 3 under vLLM admission by round robin's
    plan (1,188 s against 1,105 s predicted) and the replay ran 3,274 -> 3,382 s.

    A plan EARLIER on the predictions goes to the draws too where they outlive its predictions
    (``outlived``: single drawn items alone outlast its predicted makespan), and there every blind
    plan built is a candidate (``_drawn_bar``): the short-cot replay's lpt plans, 30% earlier than
    round robin's on the predictions, put a high-spread prompt's samples on the Ascends, where one
    run to the 4,096 cap alone took 58 s against round robin's 34-39 s a step (0.62x round robin),
    and the draws, which rated them later, were never asked (``docs/experiments.md``).

    The draws are played only while ``deadline`` has not passed: past it the plan stands wherever
    they would be asked (as where ``least_expected`` has no time for them). Started past it, the
    outlived check alone took 44-149 ms on a starved host, ending plans that far past their budget
    (docs/experiments.md, budget47); started before it, the check plays its first draws and the
    rest only where they end by it at that pace (``outlived``'s deadline; review49c). Before that
    pace is known, drawing them and playing the first took 5-8 ms at 4,096 x 32 and ended plans of
    the service's 80 ms up to 7 ms past it: they start only with their price left (``draws_price``:
    ``DRAWS_COST`` lpt phases of ``phase_s``, less the drawing of rows in hand), and so does the
    ordering, which stops by the deadline at its own pace (review50a)."""
    if blind is None:
        return placement
    reserve = request.kv_admission
    finishes = list(placement.finish_s or problem.finishes(placement.queues, reserve))
    drawn = spread is not None and (  # time to draw
        clock.now() + draws_price(problem, spread, request.seed, phase_s) < deadline
    )
    if spread is not None and drawn:
        draws = problem.draws(spread, request.seed).rows(SAMPLES)  # least_expected's, drawn once a plan
        asked = outlived(problem, placement.queues, finishes, draws, deadline)
        if asked is None:  # no time to tell whether the draws are asked: the plan stands, as below
            return placement
        if asked:
            return _drawn_bar(problem, request, (placement, finishes), blind, status, draws, deadline)
    if max(finishes, default=0.0) <= blind.makespan_s:
        return placement
    if spread is not None and not drawn:
        return placement  # not judged on the draws: the plan stands, as with no time to play them
    if spread is not None and len(problem.units) == len(problem.steps):  # the ordering takes units
        ordered = _fastest_orders(problem, placement.queues, reserve, deadline)
        if ordered is None:  # no time to order them: the plan stands, as with no time for draws
            return placement
        if max(min(f, g) for f, g in zip(finishes, ordered, strict=True)) <= blind.makespan_s:
            return placement
    if spread is not None:
        candidates = (placement.queues, blind.queues)
        if least_expected(problem, candidates, spread, reserve, request.seed, deadline) != 1:
            return placement
    return Placement(blind.queues, status, finish_s=blind.finish_s)


def _fastest_orders(
    problem: Problem, queues: Queues, reserve: bool, deadline: float
) -> tuple[float, ...] | None:
    """Each queue's finish in its fastest order (``order_queues``), or None where ordering them
    would end past ``deadline``: ``order_queues`` stops at its measured pace (each queue's first
    play, and every candidate's play, projected against it), as the other priced stages do.

    Why the price. Unpriced, ordering every queue (in waves, 4,096 x 32) took several ms at the end
    of plans already near their deadline, ending some of the service's 80 ms plans at 80.7 ms
    (budget50); a bar with no time to order keeps the plan, as it does with no time for its draws."""
    try:
        return order_queues(problem, [list(q) for q in queues], reserve, deadline)[1]
    except BudgetSpent:
        return None


def _drawn_bar(
    problem: Problem,
    request: PlanRequest,
    judged: tuple[Placement, Sequence[float]],
    blind: Blind,
    status: str,
    draws: npt.NDArray[np.int64],
    deadline: float,
) -> Placement:
    """The placement of ``judged`` (with its predicted finishes), or the blind plan (any of
    ``blind.drawn``) with the least mean makespan on ``draws`` where that is less than the
    placement's (``blind_draws.least_drawn``); ties, and no time left to play them, keep it."""
    placement, finishes = judged
    others = blind.drawn or ((blind.queues, blind.finish_s),)
    blinds = [queues for queues, _ in others]
    best = least_drawn(problem, placement.queues, finishes, blinds, draws, request.kv_admission, deadline)
    if not best:  # None (no time) or 0 (the plan itself)
        return placement
    queues, chosen = others[best - 1]
    return Placement(queues, status, finish_s=chosen)


def _candidates(
    problem: Problem,
    request: PlanRequest,
    assignment: Sequence[Sequence[int]],
    unbound: bool,
    deadline: float,
) -> list[Queues]:
    """Round robin's queues; least loaded's too where the lpt start runs a queue past its lanes,
    where the plan may yet move far from the start (``unbound``: with quantiles, placed again by
    kind), or where the batch is ``SMALL`` enough for its dealing to cost next to nothing."""
    queues = [RoundRobinPolicy().plan(request, problem).queues]
    wanted = unbound or len(problem.steps) <= SMALL or _past_lanes(problem, assignment)
    if clock.now() <= deadline and wanted:
        queues.append(LeastLoadedPolicy().plan(request, problem).queues)
    return queues


def _past_lanes(problem: Problem, assignment: Sequence[Sequence[int]]) -> bool:
    """Whether some worker's queue in ``assignment`` holds more units than it has lanes."""
    lanes = worker_lanes(problem)
    return any(len(assignment[w]) > slots for w, (slots, _) in lanes.items())


def _floor(problem: Problem, queues: Queues) -> float:
    """A lower bound of ``queues``' predicted makespan: each worker's load estimate with its cache
    full rather than ``KV_FILL`` full (at least ``KV_FILL`` times the estimate), the most of them."""
    costs = problem.costs
    floor = 0.0
    for w, queue in enumerate(queues):
        if queue:
            longest, tokens, kv, prompt = problem.item_totals(queue)
            floor = max(floor, KV_FILL * estimate(rates(costs[w]), longest, tokens, kv, prompt))
    return floor

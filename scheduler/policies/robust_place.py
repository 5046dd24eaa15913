"""Placement for the lengths as they may turn out: how late each device kind runs on draws.

Why. List scheduling balances each worker's load estimate, and the plan's orders are then hedged on
a draw of the lengths (``scheduler.policies.robust_order``). How far a worker's finish moves from
that estimate is not the same for every device kind, for two reasons. The lengths: a smaller,
slower cache has less room for the items that outrun their predictions (on the headline replay,
long-cot 4,096 x 16, 8 H100 + 8 Ascend 910B, projected-peak admission, the H100s finished 4-8%
before their point plays on draws and the Ascends 2-5% after). And the estimate itself: it counts
no drain after the last admission, when the longest runs go on with the cache emptying, about the
same number of steps on either kind and so 7% of an H100's time and 12% of a 910B's there (docs/
experiments.md, kinds63). An Ascend ended last in every step.

How. When every trajectory carries its p50 and p90 and the pool has more than one device kind, the
hedged plan is played on ``DRAWS`` draws of the lengths as the engine will run it
(``robust_order.drawn_finish``: admission on the planned lengths, ends by the draw). Each kind's
mean drawn finish over each queue's load estimate (``estimates``: ``load.time_with``, what
``lpt_assignment`` balances), relative to the earliest kind's, scales its workers' load estimates
(``kind_scales``); ``lpt.calibrated`` places the batch again on those estimates, orders and hedges
the new plan like the first, and keeps it. The ratio is over the estimate, not the point finish,
because the plan placed again balances estimate x scale: only drawn over estimate makes that
product the drawn finish. Over the point finish the estimate's own miss by kind was in no scale, so
the kinds "agreed", or were scaled short, while it was there (1.31% later over 28 seeds of the
headline). With p90 = p50 for every trajectory the draws are the predictions and the ratio is the
point finish over the estimate: the estimate's miss alone, placed again too (on exact lengths 0.7-2.4%
sooner, on predictions noise: docs/experiments.md, review64). The rule: docs/solver.md, "Placement
for lengths that are not known: each kind's lateness"; its figures: docs/experiments.md, Replay,
"Each kind's lateness", and kinds63.

The new plan is not compared with the first on the draws: over two to four draws that comparison
preferred the first plan in 11 of 12 steps where the true lengths preferred the second in 10 (the
replay's p90 is not calibrated, so the draws' spread is only indicative; the direction by kind is
what is used). The reported finishes stay the point plays, now a little above list scheduling's
own: the plan gives up some point finish for an earlier expected one. Requests without quantiles
and pools of one kind are left as they are, so the solver bench and the ``oracle`` are unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from scheduler import clock
from scheduler.at_once import ends_at_once
from scheduler.finish_draws import closed_forms
from scheduler.policies.base import Placement
from scheduler.policies.load import Load, time_with
from scheduler.policies.problem import Problem, worker_kinds
from scheduler.policies.robust import Spread, draw_matrix
from scheduler.policies.robust_order import drawn_finish

DRAWS = 2  # draws judging each kind's lateness (each plays every queue once)
AGREED = 0.01  # kinds within 1% of each other on drawn over estimate: placing again would change little
SEED_OFFSET = 1_000  # draws independent of the hedge's, from the same request seed
HOPELESS = 2.0  # give up on the draws only when their pace projects this many times the time left:
# queues differ in size, so the projection is rough, and a start that fails costs only time


def kind_scales(
    problem: Problem,
    placement: Placement,
    spread: Spread,
    reserve: bool,
    seed: int,
    deadline: float,
    after_plays: int = 0,
) -> list[float] | None:
    """Per worker, its kind's mean drawn finish over load estimate (``estimates``) divided by the
    least kind's (so the earliest kind keeps 1.0); None when every kind is within ``AGREED`` of the
    least, or when the plays might end past ``deadline``: the next worker's (as long as the slowest
    so far), or, from the pace of the workers played so far, clearly (``HOPELESS``) the rest of them
    and then ``after_plays`` more plays of every queue, what the caller does with the scales.
    Without that projection a budget too short for the caller's plays was spent on draws it could
    not use: 47 of the service's 80 ms at 1,024 x 16, for a plan then returned as it was. Workers
    are played one kind after another in turn, so the pace mixes the kinds from the start.

    Queues that run at once on the planned lengths take their draws in one vectorised pass first
    (``_at_once_means``, the same finishes to the last bit); only the others are played one by one
    and counted in the pace. That pass is priced before it starts (``plays_unusable``): not begun where
    the time already spent, counted as the caller counts it, leaves ``after_plays`` no room, nor
    where the at-once play on the planned lengths (``_priced_at_once``) says its draws would not. Unpriced,
    it ran ~55 ms at 32,768 x 256 for scales ``lpt.calibrated`` then dropped (docs/experiments.md,
    pace64)."""
    begun = clock.now()
    if begun > deadline:
        return None
    draws = draw_matrix(spread, np.random.default_rng(seed + SEED_OFFSET), DRAWS)
    estimated = estimates(problem, placement.queues)
    timed = [w for w, queue in enumerate(placement.queues) if queue and estimated[w] > 0]
    chosen = _priced_at_once(problem, placement.queues, timed, reserve, (begun, deadline), after_plays)
    if chosen is None:
        return None
    known = _at_once_means(problem, placement.queues, chosen, draws, reserve)
    rows: list[list[int]] = draws.tolist()
    kinds = worker_kinds(problem.costs, problem.active)
    ratios: list[list[float]] = [[] for _ in kinds]
    total = len(timed) - len(known)  # the workers played one by one
    slowest, spent, played = 0.0, 0.0, 0
    for k, w in _interleaved(kinds):
        if w in known:
            ratios[k].append(known[w] / estimated[w])
            continue
        if w not in timed:
            continue
        started = clock.now()
        pace = spent / played if played else 0.0  # seconds one worker's DRAWS plays take
        ahead = pace * (total - played + total * after_plays / DRAWS)
        if started + slowest > deadline or ahead > HOPELESS * (deadline - started):
            return None
        queue = list(placement.queues[w])
        ratios[k].append(drawn_finish(problem, problem.costs[w], queue, rows, reserve) / estimated[w])
        took = clock.now() - started
        slowest, spent, played = max(slowest, took), spent + took, played + 1
    return _scales(len(problem.costs), kinds, ratios)


def estimates(problem: Problem, queues: Sequence[Sequence[int]]) -> list[float]:
    """Each queue's load estimate on its worker (``load.time_with`` of its trajectories' totals on
    the planned lengths): what ``lpt_assignment(problem, scale=...)`` balances, times the scale.

    Why this and not the plan's point finish. Placing again levels estimate x scale, so the scale
    that makes that product the drawn finish is drawn over estimate. The point finish departs from
    the estimate by a share that differs by kind (the drain the estimate does not count: F/L 1.07 on
    an H100, 1.12 on a 910B at the headline's oracle), and a scale read over it leaves that share
    out. From the trajectories' totals (``Problem.item_totals``), not units, since a queue lists
    trajectories; equal to ``load.load_of`` where every unit is one trajectory."""
    pairs = zip(problem.costs, queues, strict=True)
    return [time_with(cost, Load(*problem.item_totals(queue))) for cost, queue in pairs]


def plays_unusable(begun: float, now: float, ahead: float, deadline: float, after_plays: int) -> bool:
    """Whether draws begun at ``begun``, ending ``ahead`` seconds after ``now``, leave the caller's
    ``after_plays`` plays of every queue no room before ``deadline``: each play priced at the draws'
    whole time over ``DRAWS``. One rule for both sides: ``kind_scales`` asks it before its passes,
    ``lpt.calibrated`` after the scales, so the pass is never begun where the caller would drop what
    it gives (the time spent on it would be spent for nothing)."""
    end = now + ahead
    return end + (end - begun) * after_plays / DRAWS > deadline


def _priced_at_once(
    problem: Problem,
    queues: Sequence[Sequence[int]],
    workers: Sequence[int],
    reserve: bool,
    window: tuple[float, float],
    after_plays: int,
) -> list[int] | None:
    """Those of ``workers`` whose queue runs at once on the planned lengths (``ends_at_once``, one
    vectorised play of them all); None where the draws begun at ``window[0]`` would leave the caller
    no room before ``window[1]`` (``plays_unusable``): already, before that play, or once the play's own
    time prices ``_at_once_means``' pass, which in one block costs about as much (0.84-0.97 of it,
    process CPU at the bench's four sizes: docs/experiments.md, pace64)."""
    begun, deadline = window
    at = clock.now()
    if plays_unusable(begun, at, 0.0, deadline, after_plays):
        return None
    runs = ends_at_once([(problem.costs[w], *problem.lengths(queues[w])) for w in workers], reserve)
    chosen = [w for w, ends in zip(workers, runs, strict=True) if ends is not None]
    if not chosen:
        return chosen  # no pass: the queues are played one by one, paced as they go
    done = clock.now()
    return None if plays_unusable(begun, done, done - at, deadline, after_plays) else chosen


def _at_once_means(
    problem: Problem,
    queues: Sequence[Sequence[int]],
    chosen: Sequence[int],
    draws: npt.NDArray[np.int64],
    reserve: bool,
) -> dict[int, float]:
    """``drawn_finish`` of each of ``chosen``'s queues (each runs at once on the planned lengths:
    ``_priced_at_once``), by worker, from one vectorised pass over the draws (``finish_draws.closed_forms``).

    Why. Played queue by queue through the event loop, the two draws cost 41-69 ms of a 250 ms
    plan at 4,096 x 32 (kv off) before the search started; the closed forms of the same draws
    took 4-5 ms. They are that play only where it admits the whole queue at step 0: admission
    reads the planned lengths, so a queue that does not run at once on them is left to the event
    loop, and a draw on which a queue admitted whole runs past its cache (it preempts) is played
    on its own. Each mean is summed in draw order, as ``drawn_finish`` sums it, so every value is
    its value to the last bit."""
    costs = problem.costs
    if not chosen:
        return {}
    block = [queues[w] if w in chosen else () for w in range(len(queues))]
    drawn, marked = closed_forms(costs, problem.prompts, block, draws, reserve)
    rows: list[list[int]] = draws.tolist()
    for d, w in zip(*np.nonzero(marked), strict=True):
        drawn[d, w] = drawn_finish(problem, costs[w], list(queues[w]), [rows[d]], reserve)
    return {w: sum(drawn[:, w].tolist()) / len(draws) for w in chosen}


def _scales(workers: int, kinds: list[list[int]], ratios: list[list[float]]) -> list[float] | None:
    """Each worker's kind's mean lateness over the least kind's; None unless two kinds were played
    and they disagree. A kind the plan gave nothing was not played: it counts as late as the latest,
    since ranking it as on time would move the batch onto a kind that was left empty, probably for
    being slow (a first step's equal predictions once put all 64 items on one Ascend 910B, 1.86x
    the H100's point finish, because the H100 ran late on draws that no Ascend was compared with)."""
    played = [sum(r) / len(r) for r in ratios if r]
    if len(played) < 2:
        return None
    least, latest = min(played), max(played)
    if latest <= (1.0 + AGREED) * least:
        return None
    scale = [1.0] * workers
    for members, r in zip(kinds, ratios, strict=True):
        for w in members:
            scale[w] = (sum(r) / len(r) if r else latest) / least
    return scale


def _interleaved(kinds: list[list[int]]) -> list[tuple[int, int]]:
    """(kind, worker) pairs taking one worker of each kind in turn, inventory order within a kind."""
    longest = max((len(members) for members in kinds), default=0)
    return [(k, members[i]) for i in range(longest) for k, members in enumerate(kinds) if i < len(members)]

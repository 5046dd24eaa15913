"""Ordering for the lengths as they may turn out: each queue's order judged on draws, as it will run.

Why. ``scheduler.policies.ordering`` picks each worker's order by playing candidates on the point
predictions. On exact lengths a long head (the longest items started together, short ones turning
over around them) packs the KV cache best, so that is what it picks. On predicted lengths that
is the worst bet: the engine admits on the predictions (projected-peak admission, or prompt-only
vLLM admission), every trajectory that outlives its prediction grows past what admission counted
on, and the long ones started together all do so late in the run, when the cache is full.
Evictions then cost the newest sequences their progress. Shortest-first starts the long items last,
most of them near their cap, which bounds how far past their prediction they can run. Measured on
the headline replay (long-cot 4,096 x 16 workers, steps 3-5, projected-peak admission, cpsat with
stealing): the long-head orders chosen on the predictions simulated 1.253x / 1.269x the bound
(trace seeds 1 / 2), every queue shortest-first 1.215x / 1.208x, while the oracle (exact lengths)
is 1.154x / 1.153x.

How. When every trajectory carries its p50 and p90 (``scheduler.policies.robust.spreads``), each
queue that does not run at once is played, in its planned order and shortest-first, over
``DRAWS`` common draws of the lengths: the simulator's own worker engine
(``scheduler.sim_alone.play_queue``), admitting on the planned lengths while the draw decides when
each trajectory ends, as a sidecar and its engine would. The order with the lower mean finish is
kept (ties: the planned one). Where the draws outlive the plan's predictions
(``blind_draws.outlived``: the longest drawn item of some queue, alone on its worker, outlasts the
predicted makespan on average over the request's draws) each such queue is also played highest p90
first (``spread_first``), a third candidate judged on the same draws. There a short-predicted
sample with a wide spread that runs long is what sets the finish, and shortest-first (and long
heads by the p50) start it last: on 2 H100, short-cot 100 x 8 step 3 (``trace synth --profile
short-cot --seed 1``), lpt ran 16.85 s against round robin's 14.70, highest p90 first 13.41
(docs/experiments.md, Replay). Ungated, judged on its one draw, it moved the long chain-of-thought
headline 3,008.3 -> 3,016.7 s; the screen never fires there. The reported finish stays the play on
the predictions, so plan and simulator still agree exactly on exact lengths. Queues that run at
once are left alone: with the whole queue admitted at step 0, the order does not change when
anything ends.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from scheduler import clock
from scheduler.costmodel import WorkerCost
from scheduler.lognormal import Z90
from scheduler.policies.base import Placement
from scheduler.policies.blind_draws import outlived
from scheduler.policies.ordering import shortest_first
from scheduler.policies.problem import Problem
from scheduler.policies.robust import SAMPLES, Spread
from scheduler.sim_alone import play_queue
from scheduler.sim_ledger import Ledger
from scheduler.sim_rules import DEFAULT_ENGINE, engine_rules
from scheduler.stepsum import FloatArray
from scheduler.types import PlanRequest

DRAWS = 1  # common draws judging each order. On the headline replay one, two and four draws chose
# the same orders (every queue shortest-first, both trace seeds); each draw costs two plays of every
# queue that does not run at once (~0.33 s at 4,096 x 16), so one is what fits the replay's budget.

JUDGE_COST = {False: 6.0, True: 40.0}  # a judged item's two plays, in lpt phases per trajectory of
# the batch, before the hedge's own pace is known (by ``kv_admission``: admission projects each
# candidate's peak), where the lpt start placed every queue to run at once. Measured 4.5-5.3 without
# it and 24-35 with it, at 4,096 x 32 and 16,384 x 128
WAVES_WEIGHT = 9.0  # what a trajectory the lpt start left in waves weighs in the lpt phase, against one
# it placed at once (``judge_item_s``): ordering a queue in waves plays it, and those plays are the
# hedge's own work. Where the lpt start ran every queue in waves, judging them all took 0.6-3.1 lpt
# phases under KV admission (median 1.4-1.8; 128 x 1 to 16,384 x 128) and 0.4-0.6 without, against
# 40 / 6 priced flat: priced 4 / 0.6 here (docs/experiments.md, sched54)

Queues = tuple[tuple[int, ...], ...]


def hedged(
    problem: Problem,
    request: PlanRequest,
    placement: Placement,
    spread: Spread | None,
    deadline: float,
    lpt_phase_s: float = 0.0,
    lpt_waves: int = 0,
) -> Placement:
    """``placement`` with its queues in their expected-fastest orders (``robust_orders``), where the
    trajectories carry the quantiles to draw from (``spread``: ``robust.spreads`` of the request)
    and the plays end before ``deadline`` (priced, until their own pace is known, in lpt phases of
    ``lpt_phase_s`` seconds, a phase that ordered ``lpt_waves`` trajectories in waves:
    ``judge_item_s``); else as it is."""
    if spread is None:
        return placement
    finishes = placement.finish_s or problem.finishes(placement.queues, request.kv_admission)
    reserve, seed = request.kv_admission, request.seed
    orders = robust_orders(
        problem, placement.queues, finishes, spread, reserve, seed, deadline, lpt_phase_s, lpt_waves
    )
    if orders is None:
        return placement
    return Placement(orders[0], placement.status, placement.dispatch_order, orders[1])


def robust_orders(
    problem: Problem,
    queues: Queues,
    finishes: Sequence[float],
    spread: Spread,
    reserve: bool,
    seed: int,
    deadline: float,
    lpt_phase_s: float = 0.0,
    lpt_waves: int = 0,
) -> tuple[Queues, tuple[float, ...]] | None:
    """Each worker's queue in the order with the lower expected finish (module doc), and the point
    finishes; None when judging every queue might end past ``deadline``, so the plays never run
    past it and a plan is never half hedged.

    Why the projection. Each worker's judging used to start whenever the one before it, as long
    as the slowest so far, still fitted: the first started unpriced, and a hedge that could not
    finish was only found out after a queue or more had been played. After the search, a band
    plan's queues in waves (257-640 items, 15-55 ms a worker under KV admission) met the few ms
    the search leaves (kept for the lpt plan's hedge, whose queues all run at once at the bench
    sizes): the hedge gave up every time, after spending 12-114 ms, and ended 4,096 x 32 plans
    at 272-282 ms of 250 on an idle host. How. Queues are judged smallest first (each worker's
    choice is its own, so the order changes nothing but the time), and before each, every queue
    still to judge is projected at the pace per item so far, before the first at ``judge_item_s``
    (``lpt_phase_s``: what ``lpt_start`` took, the host's pace in this plan, with ``lpt_waves`` of
    its trajectories ordered in waves): once that passes ``deadline`` nothing more is played. The whole is
    priced so before the draws are drawn and the screen for wide spreads (``_spread_keys``: the
    longest drawn item of every queue alone, over the bar's draws) is played: made first, unpriced,
    they ran a 1,024 x 16 hedge started 25 ms before its deadline 110 ms on a starved host, to find
    then that no queue fitted (docs/experiments.md, review47a)."""
    if clock.now() >= deadline:
        return None
    ordered, finish = list(queues), list(finishes)
    waves = _in_waves(problem, queues, reserve)
    judged = sorted((w for w in range(len(queues)) if waves[w]), key=lambda w: (len(queues[w]), w))
    left = sum(len(queues[w]) for w in judged)  # items still to judge
    spent, done = 0.0, 0  # seconds spent judging, and items judged
    prior = judge_item_s(reserve, lpt_phase_s, len(problem.steps), lpt_waves)  # seconds an item
    if judged and clock.now() + prior * left > deadline:
        return None  # priced past it before the draws and their screen (``_spread_keys``) are made
    if not judged:  # every queue runs at once: no order to judge, so no draw to draw
        return tuple(ordered), tuple(finish)
    draws = order_draws(problem, spread, seed)
    wide = _spread_keys(problem, queues, finishes, spread, seed)
    for w in judged:
        started = clock.now()
        if started + (spent / done if done else prior) * left > deadline:
            return None
        choice = _better_order(problem, problem.costs[w], list(queues[w]), draws, reserve, wide)
        if choice is not None:
            ordered[w], finish[w] = tuple(choice[0]), choice[1]
        spent, done, left = spent + clock.now() - started, done + len(queues[w]), left - len(queues[w])
    return tuple(ordered), tuple(finish)


def judge_item_s(reserve: bool, lpt_phase_s: float, trajectories: int, lpt_waves: int) -> float:
    """Seconds one item's judging is priced at before the hedge's own pace is known: ``JUDGE_COST``
    lpt phases of ``lpt_phase_s`` seconds per trajectory of the batch, each of the ``lpt_waves``
    trajectories the lpt start ordered in waves counted ``1 + WAVES_WEIGHT`` times.

    Why not the flat price. The lpt phase is a unit only as long as it does the same work at every
    size. Where the lpt start runs every queue at once it places and plays each queue in closed form
    (~3-6 us a trajectory), and a judged item's plays cost 24-35 times that. Where it leaves queues
    in waves it plays them in their candidate orders, the hedge's own kind of work, and the whole
    hedge took 1-2 lpt phases: priced flat at 40 a 128-item queue on one H100 (a 9-20 ms phase, a
    ~15 ms hedge) was skipped whenever the phase stalled past 1/40 of the time left (flaky53).
    Measured and fitted in docs/experiments.md, sched54."""
    weight = trajectories + WAVES_WEIGHT * lpt_waves
    return JUDGE_COST[reserve] * lpt_phase_s / max(1.0, weight)


def trajectories_in_waves(problem: Problem, queues: Queues, reserve: bool) -> int:
    """Trajectories of ``queues`` that do not run at once (``Problem.runs_at_once``, kept: the hedge
    of the same queues asks it next): of the lpt start's, ``judge_item_s``'s ``lpt_waves``. A count, named
    apart from ``_in_waves`` (each worker's flag) and ``calibrate.in_waves`` (each worker's scale)."""
    runs = problem.runs_at_once(queues, reserve)
    return sum(len(queue) for queue, run in zip(queues, runs, strict=True) if not run)


def order_draws(problem: Problem, spread: Spread, seed: int) -> list[list[int]]:
    """The ``DRAWS`` draws each order is judged on: the plan's first rows (``Problem.draws``), as
    lists for the plays' per-item reads.

    Why the plan's. The hedge drew them again from the request's seed a row at a time
    (``robust.draw_steps``): the rows the plan holds (``plan_draws``: the same numbers row by row
    as in one pass, for every sane spread), drawn twice, since its screen for wide spreads
    (``_spread_keys``) reads all ``SAMPLES`` of the plan's rows next; asked as one block for that
    reason. Where a spread could leave the linear form, a lone row could differ from the pass's in
    its last bit: the plan's is the one every other judgment reads."""
    rows: list[list[int]] = problem.draws(spread, seed).rows(SAMPLES)[:DRAWS].tolist()
    return rows


def _in_waves(problem: Problem, queues: Queues, reserve: bool) -> list[bool]:
    """Per worker, whether its queue has two items or more and does not run at once on the planned
    lengths: the queues whose order the draws can change. One vectorised pass (``ends_at_once``,
    through ``Problem.runs_at_once``, which keeps it for the at-once hedge of the same plan;
    the same verdicts as ``all_at_once_finish`` queue by queue): at 16,384 x 128, where every
    queue runs at once, the one-by-one test took 120-240 ms of a 1 s plan to change nothing."""
    runs = problem.runs_at_once(queues, reserve)  # kept: the at-once hedge asks it next
    return [len(queue) >= 2 and not run for queue, run in zip(queues, runs, strict=True)]


def _spread_keys(
    problem: Problem, queues: Queues, finishes: Sequence[float], spread: Spread, seed: int
) -> FloatArray | None:
    """Every trajectory's p90 where the request's draws (``SAMPLES`` of them, the bar's) outlive the
    plan's predicted finishes (``blind_draws.outlived``), the key of ``spread_first``; else None."""
    draws = problem.draws(spread, seed).rows(SAMPLES)  # the plan's, the bar's too (``Problem.draws``)
    if not outlived(problem, queues, finishes, draws):
        return None
    medians, sigmas, _ = spread
    with np.errstate(over="ignore"):
        p90: FloatArray = medians * np.exp(Z90 * sigmas)
    return p90


def spread_first(items: Sequence[int], p90: FloatArray) -> list[int]:
    """``items`` by decreasing p90 (``p90``: every trajectory's), ties in input order: the samples
    that may run longest start first, whatever their median (module doc)."""
    return sorted(items, key=lambda i: -float(p90[i]))


def _better_order(
    problem: Problem,
    cost: WorkerCost,
    queue: list[int],
    draws: Sequence[Sequence[int]],
    reserve: bool,
    wide: FloatArray | None = None,
) -> tuple[list[int], float] | None:
    """The order expected to end soonest, with its point finish, where it is not ``queue``; else None.
    The candidates: shortest-first, and highest p90 first where ``wide`` (every trajectory's p90)
    is given; ties keep ``queue``, then the earlier candidate (``queue`` has two items or more and
    does not run at once: ``_in_waves``)."""
    best, best_finish = queue, drawn_finish(problem, cost, queue, draws, reserve)
    others = [shortest_first(problem, queue, cost)]
    if wide is not None:
        others.append(spread_first(queue, wide))
    for alternative in others:
        if alternative in (queue, best):
            continue
        expected = drawn_finish(problem, cost, alternative, draws, reserve)
        if expected < best_finish:
            best, best_finish = alternative, expected
    if best is queue:
        return None
    return best, problem.played(cost, best, reserve)


def drawn_finish(
    problem: Problem, cost: WorkerCost, order: list[int], draws: Sequence[Sequence[int]], reserve: bool
) -> float:
    """Mean finish of the queue ``order`` over ``draws`` (each: every trajectory's steps), played as
    the engine runs it: admitted on the planned lengths, ended by the draw, by ``draw_rules``."""
    keys = [str(i) for i in order]
    prompts, planned = problem.lengths(order)
    watermark, resume = draw_rules(problem.engine, reserve)
    total = 0.0
    for draw in draws:
        ledger = Ledger(keys, prompts, [draw[i] for i in order], planned)
        total += play_queue(cost, ledger, watermark=watermark, kv_admission=reserve, resume=resume).clock
    return total / len(draws)


def draw_rules(engine: str, reserve: bool) -> tuple[float, bool]:
    """The watermark and whether an evicted sequence keeps its output, in the draws' plays: the
    plan's ``engine`` under vLLM admission, V0's (the finish model's) under projected peak.

    Why. A draw's lengths are not the planned ones, so its play evicts, and what an eviction costs
    decides which order wins. Under vLLM admission a V1 play evicts thousands of times a step on the
    long chain-of-thought replay, each a re-prefill, not a restart: judged by V0's rules the hedges
    chose orders 1.6-4.3% slower as V1 played them than V1-judged ones (cpsat, trace seeds 1-8,
    2.7% summed). Under projected peak it evicts a tenth as often or less, and V1-judged hedges
    moved seeds 1-8 by -1.9% to +2.7% (+0.1% summed; the headline's seed 1 +2.1%): V0's rules
    stay there (docs/experiments.md, Replay, helper v1plan).
    """
    rules = engine_rules(DEFAULT_ENGINE if reserve else engine)
    return rules.watermark, rules.resume_preempted

"""Order inside one worker's queue, chosen by playing candidate orders through the worker model.

Longest-first is the textbook rule against a long tail, but a continuous-batching engine admits in
queue order while the prompt fits, so longest-first fills the KV cache with sequences that all grow
at once; when it runs out, the newest are preempted and recomputed. Measured on heavy-tailed batches
(4,096 x 8 workers, KV-bound, scheduler.finish), per-worker finish relative to the placement
estimate: longest-first 1.28x mean, shortest-first 1.12x, a longest-first head holding half the KV
cache followed by the rest shortest-first 1.10x, and no single rule wins on every worker. Under
projected-peak KV admission (``kv_admission``) the same candidates serve best: on the headline
replay (long-cot 4,096 x 16 workers, steps 3-5, two trace seeds) cpsat reached 1.262x / 1.283x of
the bound with them, against 1.336x / 1.361x with the candidates tuned for final-length
reservation (longest-first and heads of 1 and 1.5 caches), which start too many long items at once.

So the order is an experiment, not a slogan: each worker plays a few candidate orders and keeps the
fastest. When the queue is admitted at once and never preempted, every order gives the same finish,
computed in closed form (``scheduler.at_once.all_at_once_finish``) without playing any order: the
common case for lightly loaded workers. A worker whose longest-first play already ends by the finish
of a worker that runs at once cannot change the makespan, so it keeps longest-first unsearched: in a
cpsat band round at 32,768 x 256 that cut ordering from 190-430 ms to 55-95 ms, same makespans (its
wave-bound lowest-band workers finish far below the makespan). Only the last worker decides the
makespan, so it alone gets a wider search (``refine_critical``: long heads of a quarter and a whole
cache, and ``spread``, lengths mixed along the queue for a cache that holds few long items at once),
repeated on the next last worker while that lowers the makespan. ``spread`` stays out of the first
search: offered to every queue it was picked on point plays that the true lengths then punished
(headline replay, projected-peak admission: 1.193 -> 1.203x the bound), while on the last worker it
changes no headline figure and moves the oracle under vLLM's admission from 1.226 to 1.203x.

All of this judges orders on the point predictions. Where the request says how unsure they are
(quantiles), ``scheduler.policies.robust_order`` judges the final orders again on draws.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from scheduler import clock, giveup
from scheduler.at_once import all_at_once_finish, all_at_once_finishes, longest_first_layout
from scheduler.costmodel import WorkerCost
from scheduler.policies.base import BudgetSpent
from scheduler.policies.problem import Problem

Order = Callable[[Problem, list[int], WorkerCost], list[int]]


def longest_first(problem: Problem, items: list[int], cost: WorkerCost) -> list[int]:
    """Decreasing planned length; ties in input order."""
    return sorted(items, key=lambda i: (-problem.steps[i], i))


def shortest_first(problem: Problem, items: list[int], cost: WorkerCost) -> list[int]:
    """Increasing planned length; ties in input order."""
    return sorted(items, key=lambda i: (problem.steps[i], i))


def long_head(share: float) -> Order:
    """Longest-first while their final KV fits ``share`` of the cache, then the rest shortest-first.

    The head starts at once and never crowds the cache; the short tail keeps it full around them.
    """

    def order(problem: Problem, items: list[int], cost: WorkerCost) -> list[int]:
        ranked = longest_first(problem, items, cost)
        budget, used, cut = share * cost.kv_capacity_tokens, 0, 0
        for i in ranked:
            used += problem.prompts[i] + problem.steps[i]
            if used > budget:
                break
            cut += 1
        return ranked[:cut] + ranked[cut:][::-1]

    return order


GOLDEN = (5**0.5 - 1) / 2  # the stride of ``spread``: consecutive picks land as far apart as can be


def spread(problem: Problem, items: list[int], cost: WorkerCost) -> list[int]:
    """The longest-first ranking taken at a golden-ratio stride: lengths mixed evenly along the queue.

    Every order above keeps similar lengths together. Where the cache holds only a few long items at
    a time (few slots, or a small cache for the lengths), a run of long items overflows it and each
    preemption loses the sequence's progress; mixed lengths grow unevenly and overflow less. On one
    H100 with 4 slots and 50k tokens of cache (100 items of up to 30k tokens) this order finished in
    4,763 s where the best sorted one took 7,841 s and the input order 4,951 s; on one H200 with a
    200k-token cache, 512 log-normal items, 481 s against 565 s.
    """
    ranked = longest_first(problem, items, cost)
    picks = sorted(range(len(ranked)), key=lambda k: (k * GOLDEN) % 1.0)
    return [ranked[k] for k in picks]


CANDIDATES: dict[bool, tuple[Order, ...]] = {
    False: (longest_first, shortest_first, long_head(0.5), long_head(0.75)),  # prompt-only admission
    True: (longest_first, shortest_first, long_head(0.5), long_head(0.75)),  # projected-peak admission
}
# The one order a queue gets when the budget leaves no time to play the candidates (``order_queues``
# with ``search_until``): the candidate that came closest to each queue's best on average, played on
# lpt's queues of 8,192 x 8, 16,384 x 16 and 65,536 x 16 (1,024-4,096 a worker, in waves). Prompt-only
# admission: the half-cache head, 1.000-1.019x the best (longest-first 1.11-1.18x); projected-peak
# admission: longest-first, 1.000-1.023x (the half-cache head 1.019-1.024x).
UNSEARCHED: dict[bool, Order] = {False: long_head(0.5), True: longest_first}
# Tried only on the worker that decides the makespan (``refine_critical``): a short head leaves most
# of the cache to short items that turn over, a full one starts every long item at once, a spread
# keeps long items apart where only a few fit.
CRITICAL_CANDIDATES: dict[bool, tuple[Order, ...]] = {
    False: (long_head(0.25), long_head(1.0), spread),
    True: (long_head(0.25), long_head(1.0), spread),
}


def best_order(
    problem: Problem, items: list[int], cost: WorkerCost, reserve: bool, limit: float = math.inf
) -> tuple[list[int], float]:
    """The fastest candidate order of ``items`` on ``cost``'s worker, and its predicted finish; with
    ``limit``, the same where that finish is below it, else some order and a value of at least it
    (``_fastest``)."""
    first = CANDIDATES[reserve][0]
    best = first(problem, items, cost)
    at_once = all_at_once_finish(cost, *problem.lengths(best), reserve)
    if at_once is not None:
        return best, at_once
    return _fastest(problem, items, cost, reserve, best, limit)


def _fastest(
    problem: Problem, items: list[int], cost: WorkerCost, reserve: bool, first: list[int], limit: float
) -> tuple[list[int], float]:
    """``_played``'s choice (the fastest candidate, the earliest of equals), each play stopped where
    it cannot win: at the best finish so far, or at ``limit`` while none is below it. The first
    candidate (``first``, longest-first) is played last.

    Why. The plateau pass (``plateau``) asks only whether a queue ends before the latest worker
    (``limit``), and its plays were 95% of the pass, which its deadline cuts live at 4,096 x 32. On
    a crowded queue longest-first preempts most: in the pass's 73 searched queues (4,096 x 32, seeds
    0-4; docs/experiments.md, plays67) its play cost 2-3.5 ms against 0.9-2.9 ms for each other
    candidate, and it was the fastest in none. Played last, it stops at the best of the others,
    mostly early on the work left (``scheduler.finish_loops``). A candidate played before the best
    so far wins a tie, as in ``_played``, so it is stopped just past that best.
    """
    _, *others = CANDIDATES[reserve]
    ranked = [(rank, candidate(problem, items, cost)) for rank, candidate in enumerate(others, 1)]
    best, best_finish, best_rank = first, math.inf, -1
    for rank, order in [*ranked, (0, first)]:
        if best_finish >= limit:  # none below the limit yet: only one below it can count
            bound = limit
        else:  # an earlier candidate wins a tie: stopped past the best, it reports one
            bound = math.nextafter(best_finish, math.inf) if rank < best_rank else best_finish
        finish = problem.played(cost, order, reserve, stop_at=bound)
        if best_rank < 0 or finish < bound:  # below its bound, a play is its whole finish
            best, best_finish, best_rank = order, finish, rank
    return best, best_finish


def _played(
    problem: Problem,
    items: list[int],
    cost: WorkerCost,
    reserve: bool,
    best: list[int],
    floor: float = 0.0,
    deadline: float | None = None,
    search_until: float | None = None,
) -> tuple[list[int], float, float]:
    """The fastest candidate order by playing each (``best``: the first candidate's order), its
    finish, and how long the first play took; when that one already finishes by ``floor`` (a
    finish some other worker has anyway), no other order can change the makespan and none is
    played.

    With ``deadline``, raises ``BudgetSpent`` before a play that might end past it (judged by the
    first play, which costs about as much as any other of the same queue): a crowded queue's four
    plays took up to ~20 ms at 4,096 x 32, so a check per queue let a cpsat round end that far past
    its budget. With ``search_until`` such a play is skipped instead, keeping the best so far.
    """
    _, *others = CANDIDATES[reserve]
    started = clock.now()
    best_finish = problem.played(cost, best, reserve)
    play_s = clock.now() - started
    if best_finish <= floor:
        return best, best_finish, play_s
    for candidate in others:
        if deadline is not None and clock.now() + play_s > deadline:
            raise BudgetSpent
        if search_until is not None and clock.now() + play_s > search_until:
            break
        order = candidate(problem, items, cost)
        finish = problem.played(cost, order, reserve, stop_at=best_finish)
        if finish < best_finish:  # a play stopped at best_finish cannot pass this
            best, best_finish = order, finish
    return best, best_finish, play_s


class Outdone(Exception):  # noqa: N818 - a signal, not an error: the caller keeps its best plan
    """A queue that runs at once already ends at or past the plan to beat (``order_queues``'s
    ``bar``): no order of any queue can make this assignment finish sooner, so none is played."""


def order_queues(
    problem: Problem,
    assignment: Sequence[Sequence[int]],
    reserve: bool,
    deadline: float | None = None,
    search_until: float | None = None,
    bar: float | None = None,
) -> tuple[tuple[tuple[int, ...], ...], tuple[float, ...]]:
    """Each worker's trajectory queue in its fastest candidate order, and its predicted finish.

    A queue that runs at once keeps longest-first at its closed-form finish; every other one is
    ordered by ``_ordered``, in worker order. With ``deadline`` (``scheduler.clock.now()``), raises
    ``BudgetSpent`` rather than run past it; with ``search_until`` instead, plays a queue once where
    the time left does not allow its search (``_Budget`` says when, and why). With ``bar``, raises
    ``Outdone`` before any play where a queue that runs at once ends at or past it: every order
    gives that queue the same finish, and ``refine_critical`` leaves such a queue as it is, so the
    plan cannot end before ``bar`` (a cpsat round that cannot win: ``bandround.play_round``).
    """
    queues, at_once = _longest_first_at_once(problem, assignment, reserve)
    floor = max((f for f in at_once if f is not None), default=0.0)
    if bar is not None and floor >= bar:
        raise Outdone
    later = sum(len(queues[w]) for w, finish in enumerate(at_once) if finish is None)
    budget = _Budget(deadline, search_until, later)
    finishes: list[float] = []
    for w, finish in enumerate(at_once):
        if finish is None:
            giveup.check()  # a queue's plays are the floor's longest part on a starved host
            queues[w], finish = _ordered(problem, w, queues[w], reserve, floor, budget)
        finishes.append(finish)
    return tuple(queues), tuple(finishes)


@dataclass(slots=True)
class _Budget:
    """What ``order_queues`` may still spend, and the pace it has measured so far.

    With ``deadline``, ``BudgetSpent`` is raised when a queue still to be played is reached past
    it, when one play of it and of every queue after it would end past it at the last first play's
    pace per item, or when one of its candidate plays might end past it (``_played``). Each first
    play is otherwise unchecked: under KV admission a band plan's two lowest-band queues (~640
    items in waves at 4,096 x 32) took 20-40 ms a play, and the second, started just before the
    deadline, ended a cpsat round 17-31 ms past the search's end, leaving the robust choice no
    time. Only the first queue played, whose pace is not yet known, may still run past it.

    With ``search_until`` instead, a queue whose search might end past it (judged by the last
    searched queue's, per item) is played once, in the ``UNSEARCHED`` order, and a search that
    reaches it keeps the best order played so far: a plan that must be returned, such as lpt's,
    then keeps close to its budget. Without it, 65,536 trajectories on 16 workers (4,096 a worker,
    in waves) took 13.6 s to order under projected-peak admission, four plays of every queue,
    against a budget of 80 ms. A queue is searched only where its whole search (at the last
    search's pace per item; before any, every candidate at the last play's) leaves time for one
    play of every queue after it (the plays that cannot be skipped): searching until
    ``search_until`` and only then playing the rest once each ended the long chain-of-thought
    headline's lpt ordering (4,096 x 16, an 80 ms budget) 5-10 ms past it. Deciding before the
    queue's first play matters: a search cut right after it keeps longest-first, 17% slower there
    than the ``UNSEARCHED`` order.
    """

    deadline: float | None
    search_until: float | None
    later: int  # items of the queues still to be played (that do not run at once)
    search_pace_s: float = 0.0  # seconds per item of the last searched queue's plays, all of them
    pace_s: float = 0.0  # seconds per item of the last queue's first play: what each later queue needs


def _ordered(
    problem: Problem, w: int, queue: tuple[int, ...], reserve: bool, floor: float, budget: _Budget
) -> tuple[tuple[int, ...], float]:
    """Worker ``w``'s ``queue`` (longest first, not run at once) in the order ``budget`` allows
    (searched, or played once in the ``UNSEARCHED`` order), and its finish; updates the pace."""
    if budget.deadline is not None and clock.now() > budget.deadline:
        raise BudgetSpent
    started = clock.now()
    budget.later -= len(queue)
    pace_s, later = budget.pace_s, budget.later
    if budget.deadline is not None and started + pace_s * (len(queue) + later) > budget.deadline:
        raise BudgetSpent  # one play of this queue and of every later one, at the last pace
    searching_s = (budget.search_pace_s or len(CANDIDATES[reserve]) * pace_s) * len(queue)
    if budget.search_until is not None and started + searching_s + pace_s * later > budget.search_until:
        cost = problem.costs[w]  # no time for the candidates: the one order that serves best
        order = UNSEARCHED[reserve](problem, list(queue), cost)
        finish = problem.played(cost, order, reserve)
        budget.pace_s = (clock.now() - started) / max(len(order), 1)
        return tuple(order), finish
    # the queue does not run at once: the order matters, play the candidates
    order, finish, play_s = _played(
        problem,
        list(queue),
        problem.costs[w],
        reserve,
        list(queue),
        floor,
        budget.deadline,
        budget.search_until,
    )
    budget.search_pace_s = (clock.now() - started) / max(len(order), 1)
    budget.pace_s = play_s / max(len(order), 1)
    return tuple(order), finish


def refine_critical(
    problem: Problem,
    queues: tuple[tuple[int, ...], ...],
    finishes: tuple[float, ...],
    reserve: bool,
    deadline: float,
) -> tuple[tuple[tuple[int, ...], ...], tuple[float, ...]]:
    """More candidate orders for the worker that finishes last, while that lowers the makespan.

    Only the last worker decides the makespan, so the wider search is spent there: when one of
    ``CRITICAL_CANDIDATES`` finishes it sooner, it is kept and the next last worker is tried; the
    first last worker no candidate improves, or whose queue runs at once (then no order matters),
    ends the search. Each try must fit before ``deadline`` at twice the last try's cost; the result
    is never slower. Each try checks the caller's hard deadline first (``scheduler.giveup``): it
    ends cpsat's band rounds (``bandround.play_round``) and its repair, and was the one part of a
    round that did not (deadline48).
    """
    ordered, finish = list(queues), list(finishes)
    tried: set[int] = set()
    cost_s = 0.0
    while deadline - clock.now() > 2 * cost_s:
        giveup.check()
        started = clock.now()
        w = max(range(len(finish)), key=finish.__getitem__)
        if w in tried or len(ordered[w]) < 2:
            break
        tried.add(w)
        items, cost = list(ordered[w]), problem.costs[w]
        if all_at_once_finish(cost, *problem.lengths(items), reserve) is not None:
            break  # it runs at once: every order finishes together
        best, best_finish = None, finish[w]
        for candidate in CRITICAL_CANDIDATES[reserve]:
            order = candidate(problem, items, cost)
            played = problem.played(cost, order, reserve, stop_at=best_finish)
            if played < best_finish:
                best, best_finish = order, played
        cost_s = clock.now() - started
        if best is None:
            break
        ordered[w], finish[w] = tuple(best), best_finish
    return tuple(ordered), tuple(finish)


def _longest_first_at_once(
    problem: Problem, assignment: Sequence[Sequence[int]], reserve: bool
) -> tuple[list[tuple[int, ...]], list[float | None]]:
    """Every worker's queue longest first, and its finish when it runs at once (None otherwise):
    ``longest_first`` and ``all_at_once_finish`` for all workers in one vectorised pass."""
    if len(problem.units) == len(problem.steps):  # every unit is one trajectory: unit u is item u
        items = np.fromiter(itertools.chain.from_iterable(assignment), dtype=np.int64)
        sizes = [len(units) for units in assignment]
    else:
        members = [[i for u in units for i in problem.units[u].members] for units in assignment]
        items = np.fromiter(itertools.chain.from_iterable(members), dtype=np.int64)
        sizes = [len(m) for m in members]
    bounds = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    worker = np.repeat(np.arange(len(sizes)), sizes)
    steps = np.asarray(problem.steps, dtype=np.int64)[items]
    order = longest_first_layout(worker, steps, items, len(problem.steps))  # ties by index
    items, steps = items[order], steps[order]
    prompts = np.asarray(problem.prompts, dtype=np.int64)[items]
    finishes = all_at_once_finishes(problem.costs, prompts, steps, bounds.tolist(), reserve)
    flat, edges = items.tolist(), bounds.tolist()
    queues = [tuple(flat[edges[w] : edges[w + 1]]) for w in range(len(sizes))]
    return queues, finishes

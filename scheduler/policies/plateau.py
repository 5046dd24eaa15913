"""Lowering the plateau: single-unit moves and swaps off the latest worker, each judged by plays.

Why. After cpsat's rounds at 4,096 x 32 the H100s and the upper 910Bs end on one plateau (27
workers within 0.5% on seed 0) while the cache-bound tail 910Bs end 3-15% early. The exact repair
(``exchange``) never runs there: it needs the slowest worker to trail the runner-up by 0.5%, and a
CP-SAT split of a few workers on the fluid load model lowers no plateau (with its gain limit off, 60
moves of 8-15 partners kept none on seed 0: docs/experiments.md, plateau66). What lowers it is a
chain, each step small: the latest worker gives one unit, or swaps one for a shorter one, to a worker
that ends earlier, and the move is kept only where both workers' ``best_order`` plays end before the
latest worker did. Repeated on whichever worker is latest, the whole plateau comes down: 1.0247 ->
1.0216 on seed 0 within 32 plays.

Cost. Each try is one or two plays: 0.1-0.2 ms on a worker whose queue runs at once, 2-6 ms on a
cache-bound one. The pass stops at its deadline; after ``MAX_PLAYS`` plays (what an idle host's plan
has left of the 4,096 x 32 budget) where a quarter second or less is left at its start; and when no
move on the latest worker is kept. With more time left (the 1 s budgets handed back ~600 ms at
16,384 x 128) it may go on to ``PLAYS_PER_S`` plays a second left, those past ``MAX_PLAYS`` started
only in the first ``EXTRA_SHARE`` of that time (``_Budget``), and where the latest worker keeps no
move it lowers the ``NEXT`` latest after it once each before trying it again. Counts bound it under a
frozen clock, so a replay runs it as far as an idle host would.

Where caches differ, a worker of the smallest cache is offered only units no longer than its own
longest: a longer one makes it cache-bound at once, and those tries were most of the plays and never
kept. Units of several trajectories (prefix affinity) are left alone: the pass returns None, the plan
as it was.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from typing import NamedTuple

from scheduler import clock
from scheduler.policies.ordering import best_order
from scheduler.policies.problem import Problem

MAX_PLAYS = 32  # plays per pass at most (seed 0 at 4,096 x 32: 26 plays took the plateau from 1.0247
# to 1.0216; plateau66)
PLAYS_PER_S = 128  # a pass started with more than MAX_PLAYS / PLAYS_PER_S seconds left may play this
# many a second of it (1 s budgets: 125 frozen; at 16,384 x 128 seeds 2-4 1.0251/1.0308/1.0280 ->
# 1.0248/1.0294/1.0279, 32,768 x 256 median 1.0267 -> 1.0265; docs/experiments.md, reach67)
EXTRA_SHARE = 0.5  # plays past MAX_PLAYS start only within this share of the time left at the pass's
# start: the rest goes back to the plan (16,384 x 128's p95 stays well inside its budget)
NEXT = 15  # where the latest worker keeps no move and the budget goes past MAX_PLAYS, the next this
# many latest are lowered once each (16,384 x 128 seed 1 1.0257 -> 1.0254 frozen; reach67)
TRIES = 3  # candidate moves (or swaps) tried per (latest, receiver) pair
FIT = 0.9  # a candidate's share of the receiver's finish must fit this fraction of the gap


class _Sorted(NamedTuple):
    """A queue by length (``_Pass.sorted_queue``)."""

    down: list[int]  # longest first
    keys: list[int]  # ``down``'s negated lengths, ascending (for ``bisect``)
    up: list[int]  # shortest first
    lightest: float  # the least KV-token-steps of an item


class _Budget(NamedTuple):
    """How far a pass may go (module doc): its play cap, and the time by which a play past
    ``MAX_PLAYS`` must start."""

    cap: float
    extra_end: float

    @classmethod
    def left(cls, deadline: float) -> _Budget:
        """The budget of a pass starting now with ``deadline``: ``PLAYS_PER_S`` plays a second left, at
        least ``MAX_PLAYS``; on a frozen clock a count of the whole budget, as an idle host's."""
        start = clock.now()
        left = max(0.0, deadline - start)
        return cls(max(float(MAX_PLAYS), PLAYS_PER_S * left), start + EXTRA_SHARE * left)


class _Pass:
    """One pass's queues, finishes and play count (``lower``)."""

    def __init__(
        self, problem: Problem, queues: Sequence[tuple[int, ...]], finishes: Sequence[float], reserve: bool
    ) -> None:
        self.problem, self.reserve = problem, reserve
        self.queues = [list(q) for q in queues]
        self.finish = list(finishes)
        self.plays = 0
        self.budget = _Budget(float(MAX_PLAYS), math.inf)  # ``lower`` sets it from the deadline
        self.longest = 0.0  # the longest try so far (two plays): none starts that would end past the
        # deadline at that pace (checked only at a try's start, passes ran 10-28 ms past it live)
        kv = problem.kv_steps  # per trajectory, so per unit: the pass takes single units only; () where
        # not derived (a hand-built problem, as ``balance``'s): the units' own then, a live branch
        self.kv = kv if len(kv) == len(problem.units) else tuple(unit.kv_steps for unit in problem.units)
        self.total = [sum(map(self.kv.__getitem__, queue)) for queue in self.queues]
        caches = {problem.costs[w].kv_capacity_tokens for w in problem.active}
        self.allowed: dict[int, tuple[tuple[int, ...], frozenset[int]]] = {}  # ``may``
        self.by_length: dict[int, _Sorted] = {}  # ``sorted_queue``, dropped for a worker whose queue changes
        self.edge = {  # the smallest cache's longest, where caches differ (module doc); an idle worker
            # has no longest, so no edge: one of 0 offered it nothing (review67)
            w: max(map(problem.steps.__getitem__, queues[w]))
            for w in problem.active
            if len(caches) > 1 and problem.costs[w].kv_capacity_tokens == min(caches) and queues[w]
        }

    def play(self, w: int, items: list[int], late: float) -> tuple[list[int], float]:
        """``items`` in ``w``'s best order, and its finish (one play, counted), where that is before
        ``late``; else a value of at least ``late``: the move is refused then, and its plays stop
        there (``ordering.best_order``'s ``limit``)."""
        self.plays += 1
        return best_order(self.problem, items, self.problem.costs[w], self.reserve, late)

    def may(self, unit: int, w: int) -> bool:
        """Whether ``w`` may take ``unit``: one set per distinct ``allowed`` tuple, where a tuple's ``in``
        scans up to 256 workers per candidate (32,768 x 256)."""
        allowed = self.problem.units[unit].allowed
        found = self.allowed.get(id(allowed))
        if found is None:  # the tuple is held with its set, so its id is not reused
            found = self.allowed[id(allowed)] = (allowed, frozenset(allowed))
        return w in found[1]

    def sorted_queue(self, w: int) -> _Sorted:
        """``w``'s queue by length both ways (ties in queue order) and its lightest item's KV-token-steps,
        kept until ``w``'s queue changes: sorted once, not once per receiver."""
        if w not in self.by_length:
            steps, queue = self.problem.steps, self.queues[w]
            down = sorted(queue, key=lambda i: -steps[i])
            self.by_length[w] = _Sorted(
                down,
                [-steps[j] for j in down],
                sorted(queue, key=lambda i: steps[i]),
                min(map(self.kv.__getitem__, queue), default=0.0),
            )
        return self.by_length[w]

    def offered(self, worst: int, r: int, swap: bool) -> list[tuple[int, int | None]]:
        """Up to ``TRIES`` moves of ``worst``'s items to ``r`` (longest first), or swaps of its
        ``TRIES`` shortest for a shorter item of ``r``'s (closest in length first), each within ``FIT``
        of the gap by load share (``r``'s finish over its KV-token-steps, times the item's)."""
        problem, own = self.problem, self.sorted_queue(worst)
        share = self.finish[r] / self.total[r] if self.total[r] > 0 else 0.0
        room = FIT * (self.finish[worst] - self.finish[r])
        edge = self.edge.get(r)
        fits = (i for i in (own.up if swap else own.down) if edge is None or problem.steps[i] <= edge)
        if swap:
            mine = [i for _, i in zip(range(TRIES), (i for i in fits if self.may(i, r)), strict=False)]
            return self._swaps(worst, r, mine, share, room) if mine else []
        if share * own.lightest >= room:  # no item of the latest worker's fits the gap
            return []
        moves = (i for i in fits if share * self.kv[i] < room and self.may(i, r))
        return [(i, None) for _, i in zip(range(TRIES), moves, strict=False)]

    def _swaps(
        self, worst: int, r: int, mine: list[int], share: float, room: float
    ) -> list[tuple[int, int | None]]:
        """Swaps of each of ``mine`` for a shorter item of ``r``'s, closest in length first, up to the
        first that does not fit ``room``: one pass over ``r``'s queue for each of ``mine``, so a step's
        offers stay bounded (scanning every item of the latest worker, a pass ran 212 ms past 250 live)."""
        problem, theirs = self.problem, self.sorted_queue(r)
        swaps: list[tuple[int, int | None]] = []
        for i in mine:
            kv_i = self.kv[i]
            for j in theirs.down[bisect_right(theirs.keys, -problem.steps[i]) :]:  # the shorter ones
                if not self.may(j, worst):
                    continue
                if share * (kv_i - self.kv[j]) >= room or len(swaps) >= TRIES:
                    break
                swaps.append((i, j))
        return swaps[:TRIES]

    def step(self, deadline: float) -> bool:
        """One kept move or swap off the latest worker; where it keeps none and the budget goes past
        ``MAX_PLAYS``, one off each of the ``NEXT`` latest after it, each judged by its own finish: on
        a plateau of ~100 workers the latest can be stuck until the others come down (16,384 x 128
        seed 1 stopped at 33 plays, 1.0257). False when none is kept, or out of plays or time."""
        latest = sorted(self.problem.active, key=lambda w: (-self.finish[w], w))
        kept = self._lowered(latest[0], deadline)
        if kept is not False or self.budget.cap <= MAX_PLAYS:
            return bool(kept)
        for w in latest[1 : 1 + NEXT]:
            lowered = self._lowered(w, deadline)
            if lowered is None:
                break
            kept = kept or lowered
        return kept

    def _lowered(self, worst: int, deadline: float) -> bool | None:
        """One kept move or swap off ``worst`` to a worker that ends earlier, earliest first: True,
        False where none is kept, None where out of plays or time."""
        late = self.finish[worst]
        receivers = sorted(
            (w for w in self.problem.active if self.finish[w] < late), key=lambda w: (self.finish[w], w)
        )
        for swap in (False, True):
            for r in receivers:
                if clock.now() >= deadline:  # before the receiver's offers too: at 32,768 x 256 the
                    return None  # offers of 255 receivers, checked only before a play, overran it
                for i, j in self.offered(worst, r, swap):
                    started = clock.now()
                    if self._spent(started, deadline):
                        return None
                    kept = self._tried(worst, r, i, j, late)
                    self.longest = max(self.longest, clock.now() - started)
                    if kept:
                        return True
        return False

    def _spent(self, started: float, deadline: float) -> bool:
        """Whether a try (two plays, ``longest`` at the pace so far) starting at ``started`` may not:
        past the cap, or ending past the deadline, or past ``MAX_PLAYS`` and the budget's extra end."""
        plays, end = self.plays + 2, started + self.longest
        return (
            plays > self.budget.cap or end >= deadline or (plays > MAX_PLAYS and end >= self.budget.extra_end)
        )

    def _tried(self, worst: int, r: int, i: int, j: int | None, late: float) -> bool:
        """Play the move (or swap) of ``i`` (for ``j``) from ``worst`` to ``r``; keep it where both end
        before ``late``."""
        order_r, finish_r = self.play(r, [q for q in self.queues[r] if q != j] + [i], late)
        if finish_r >= late:
            return False
        back = [j] if j is not None else []
        order_w, finish_w = self.play(worst, [q for q in self.queues[worst] if q != i] + back, late)
        if finish_w >= late:
            return False
        self.queues[r], self.finish[r] = order_r, finish_r
        self.by_length.pop(r, None)
        self.by_length.pop(worst, None)
        self.queues[worst], self.finish[worst] = order_w, finish_w
        moved = self.kv[i] - (self.kv[j] if j is not None else 0.0)
        self.total[r] += moved
        self.total[worst] -= moved
        return True


def lower(
    problem: Problem,
    queues: Sequence[tuple[int, ...]],
    finishes: Sequence[float],
    reserve: bool,
    deadline: float,
) -> tuple[tuple[tuple[int, ...], ...], tuple[float, ...]] | None:
    """``queues`` with the plateau lowered by kept moves (module doc), or None where none was kept."""
    if len(problem.units) != len(problem.steps) or len(problem.active) < 2:  # a unit of several (the
        # units are as many as the trajectories only where each is one: ``Problem.units``)
        return None
    state = _Pass(problem, queues, finishes, reserve)
    state.budget = _Budget.left(deadline)
    kept = 0
    while state.step(deadline):
        kept += 1
    if not kept:
        return None
    return tuple(tuple(q) for q in state.queues), tuple(state.finish)

"""Placement for lengths that are not known, when the whole batch runs at once: fastest kind first.

Why. When a batch fits in the pool's slots and caches, every trajectory starts at step 0 and each
worker ends with its longest one: the makespan is one trajectory's length times the per-step cost
of the worker it landed on. Which trajectory that is, the predictions do not say well: on the real
math100 trace (400 short chain-of-thought samples, step 1 predicted from step 0) the predictor's
p90 covered 84% of the samples, the log residuals spread three times wider than its quantiles
say, and the longest sample, predicted at 554 tokens (p90 589), ran 2,107. Balancing the point
predictions (``lpt``, ``cpsat``) fills every worker to the same predicted finish and so puts the
predicted-short, possibly long samples on the slow kind, where any of them running long costs
about twice what it costs on an H100: on 2 H100 + 2 Ascend 910B that plan ran 30.5 s, the
length-blind round robin 16.7 s, the oracle 16.3 s.

How. The candidate here keeps the tail risk on the fastest kind: units are taken longest first and
each goes to a worker of the fastest kind that still runs its whole queue at once (a slot free,
the all-at-once KV peak under the cache, ``KvPeaks``), the least loaded of them by the load
estimate; only when no such worker is left does a unit go to the next kind, and so on. Where some
unit fits no worker at once, the regime does not hold and there is no candidate (None): queues
that run in waves are what the rest of the planner is for, and where the plan's own queues do not
run at once on the planned lengths (the long chain-of-thought headline) no draw is played at all.
``at_once_hedge`` plays it against the plan ``lpt`` or ``cpsat`` would otherwise return over
common draws of the lengths, each with one trajectory running as long as the batch's longest p90
(``outlier_means``), and keeps the one expected to end sooner. Each candidate's draws are played
in one vectorised pass (``scheduler.finish_draws``), the same finishes to the last bit as one play
a draw at a sixth of the cost (math100, 2 H100 + 2 Ascend 910B: the whole hedge ~9 ms against
~30 ms), so it fits the service's 80 ms plan; whether it fits is judged on the policy's plan's
first ``TIMED`` draws, before the candidate is built, and building and ordering it must leave
the rest of the draws' time (``_timed``).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from scheduler import clock
from scheduler.policies.base import Placement
from scheduler.policies.fastest_plain import PACE_EVERY, past, plain_fastest
from scheduler.policies.kvpeak import KvPeaks
from scheduler.policies.load import Load, estimate, rates
from scheduler.policies.ordering import order_queues
from scheduler.policies.outlier_draws import LazyDraws, outlier_means
from scheduler.policies.plan_draws import priced
from scheduler.policies.problem import Problem, Unit, longest_first, worker_kinds
from scheduler.policies.robust import SAMPLES, Spread, least_mean
from scheduler.stepsum import FloatArray
from scheduler.types import PlanRequest

TIMED = 4  # draws of the policy's plan played and timed before the comparison is committed to
CHUNK = 4  # draws a side played at a time: small numpy blocks (8 draws of a 1,024 x 16 plan ~1.3 ms,
# 16 at once ~20 ms on a loaded 2-core host), and a verdict checked after each
CLEAR = 8  # draws a side after which a clear difference ends the comparison (``_clear``)
CLEAR_Z = 3.0  # standard errors of the paired mean difference that make it clear
CHECK_COST = 1.0  # lpt phases the at-once check and the first ``TIMED`` draws take together, the part
# of the hedge played before its own pace is known: 0.7-1.0 at 4,096 x 32, 0.6-0.9 at 16,384 x 128;
# drawing those rows only charged where not in hand (``plan_draws.priced``)


NOT_ASKED, KEPT, FASTEST, UNJUDGED = "", "kept", "fastest", "unjudged"  # ``Placement.at_once``
JUDGED = (KEPT, FASTEST)


class Candidate(NamedTuple):
    """The fastest-kind-first plan as one judgment built and played it, so that another judgment of
    the same batch (``lpt``'s plan placed again, ``cpsat``'s searched plan) plays only its own side
    and the candidate's draws not played yet: the candidate does not depend on the plan it is
    weighed against."""

    draws: LazyDraws  # drawn as far as the judgments asked
    queues: tuple[tuple[int, ...], ...]
    finishes: tuple[float, ...]
    means: FloatArray  # ``outlier_means`` of ``queues`` on the first ``len(means)`` draws
    draw_s: float  # what one side's draw took at the last pace measured


class Judged(NamedTuple):
    """``at_once_judged``'s answer: the plan (its ``at_once`` says what the hedge did) and the
    candidate where one was built and played, for the next judgment of the same batch."""

    placement: Placement
    candidate: Candidate | None


def at_once_hedge(
    problem: Problem,
    request: PlanRequest,
    placement: Placement,
    spread: Spread | None,
    deadline: float,
    lpt_phase_s: float = 0.0,
) -> Placement:
    """``at_once_judged``'s plan: ``placement`` (its ``at_once`` set where the hedge was asked), or
    the fastest-kind-first plan."""
    return at_once_judged(problem, request, placement, spread, deadline, lpt_phase_s).placement


def at_once_judged(
    problem: Problem,
    request: PlanRequest,
    placement: Placement,
    spread: Spread | None,
    deadline: float,
    lpt_phase_s: float = 0.0,
    candidate: Candidate | None = None,
) -> Judged:
    """``placement``, or the fastest-kind-first plan (``fastest_first``) where the batch runs at once
    and that plan is expected to end sooner over draws of the lengths with one outlier
    (``outlier_means``); ``placement`` itself without quantiles, with one kind, or where the batch does
    not run at once (``NOT_ASKED``), and marked ``UNJUDGED`` when the draws would not fit ``deadline``
    (judged before anything is checked when less than ``CHECK_COST`` lpt phases of ``lpt_phase_s``
    seconds are left). The candidate runs at once, so there is no order to hedge (``robust_order``
    leaves such queues alone). With ``candidate`` (an earlier judgment's, same batch and request),
    only ``placement``'s side is played.

    Why the verdict. The plan returned was the same object whether the hedge judged or ran out of
    time, and on the service's batches that decides 1.89x against 2.5-2.74x the bound over draws
    (budget49): ``Placement.at_once`` carries it to the plan's report and the service's answer.

    Why the price. The at-once check and the first draws are what tell the hedge its pace, so
    they were started whenever the deadline had not passed: 3-130 ms (4,096 x 16 to 16,384 x
    1,024) of plans already near their budget, and on a loaded host 100-200 ms that ended 16,384 x
    128 plans at 1,020-1,090 ms of 1 s. They cost about one lpt phase, measured on the same host
    at the start of the same plan."""
    if spread is None or not _within_slots(problem) or len(worker_kinds(problem.costs, problem.active)) < 2:
        return Judged(placement, None)
    rows = problem.draws(spread, request.seed)  # the plan's: those in hand cost nothing to draw
    if clock.now() + priced(CHECK_COST, rows, TIMED, lpt_phase_s) >= deadline:  # no draw after the check
        return Judged(_marked(placement, UNJUDGED), candidate)
    if not _runs_at_once(problem, placement.queues, request.kv_admission):
        return Judged(placement, None)
    if candidate is not None:
        return _judging(problem, request, placement, _NO_DRAWS, candidate, deadline)
    draws = LazyDraws(spread, request.seed, rows)
    timed = _timed(problem, placement.queues, draws, request.kv_admission, deadline)
    if timed is None:
        return Judged(_marked(placement, UNJUDGED), None)
    head, draw_s = timed
    built = deadline - (2 * CLEAR - TIMED) * draw_s  # what building and ordering the candidate must end by
    assignment = _fastest(problem, built)
    if assignment is None or assignment is LATE:  # no candidate: this plan is what judging keeps
        return Judged(_marked(placement, UNJUDGED if assignment is LATE else KEPT), None)
    queues, finishes = order_queues(problem, assignment, request.kv_admission, search_until=built)
    if queues == placement.queues:
        return Judged(_marked(placement, KEPT), None)  # the same plan
    if clock.now() > built:
        return Judged(_marked(placement, UNJUDGED), None)  # ordering ran into the plays' time
    built_candidate = Candidate(draws, queues, tuple(finishes), _NO_DRAWS, draw_s)
    return _judging(problem, request, placement, head, built_candidate, deadline)


_NO_DRAWS: FloatArray = np.zeros(0)


def _judging(
    problem: Problem,
    request: PlanRequest,
    placement: Placement,
    mine: FloatArray,
    candidate: Candidate,
    deadline: float,
) -> Judged:
    """``placement`` (``KEPT``) or ``candidate``'s plan (``FASTEST``), both played ``CHUNK`` draws at
    a time (``mine``: ``placement``'s means so far) until the difference is clear (``_clear``, from
    ``CLEAR`` draws a side) or every draw is played (the least mean, ``placement`` on a tie);
    ``UNJUDGED`` where the next plays would end past ``deadline`` at the pace measured so far.

    Why. Every one of the ``SAMPLES`` draws of both plans was played before a verdict, ~45 ms at
    1,024 x 16 and ~130-230 ms at 4,096 x 32 on a loaded host, and the service's 80 ms plans had
    ~35 ms left for it; on its batches one plan ran ~1.3x the other on every draw, which 8 draws
    tell as surely as 32."""
    if placement.queues == candidate.queues:
        return Judged(_marked(placement, KEPT), candidate)
    reserve, theirs, draw_s = request.kv_admission, candidate.means, candidate.draw_s
    while True:
        target = min(SAMPLES, max(CLEAR, len(mine) + CHUNK, len(theirs) if len(mine) < CLEAR else 0))
        started = clock.now()
        plays = max(0, target - len(mine)) + max(0, target - len(theirs))
        if started + plays * draw_s > deadline:
            return Judged(_marked(placement, UNJUDGED), candidate._replace(means=theirs, draw_s=draw_s))
        mine = _more(problem, placement.queues, candidate.draws, mine, target, reserve)
        theirs = _more(problem, candidate.queues, candidate.draws, theirs, target, reserve)
        if plays:
            draw_s = (clock.now() - started) / plays
        kept = candidate._replace(means=theirs, draw_s=draw_s)
        verdict = _clear(mine[:target], theirs[:target]) if target < SAMPLES else None
        if target >= SAMPLES:
            verdict = least_mean((mine[:SAMPLES], theirs[:SAMPLES])) == 1
        if verdict is not None:
            return Judged(_chosen(placement, verdict, kept), kept)


def _more(
    problem: Problem,
    queues: Sequence[Sequence[int]],
    draws: LazyDraws,
    means: FloatArray,
    target: int,
    reserve: bool,
) -> FloatArray:
    """``means`` (``queues``' ``outlier_means`` on the first draws) extended to ``target`` draws."""
    if len(means) >= target:
        return means
    more = outlier_means(problem, queues, draws.block(len(means), target), reserve)
    return np.concatenate((means, more))


def _clear(mine: FloatArray, theirs: FloatArray) -> bool | None:
    """True where the candidate (``theirs``) ends clearly sooner on these common draws, False where
    the plan (``mine``) does, None where the paired difference is within ``CLEAR_Z`` standard errors
    of naught (or fewer than ``CLEAR`` draws are played)."""
    if len(mine) < CLEAR:
        return None
    gaps = mine - theirs
    margin = CLEAR_Z * float(np.std(gaps, ddof=1)) / math.sqrt(len(gaps))
    mean = float(np.mean(gaps))
    return True if mean > margin else False if mean < -margin else None


def _chosen(placement: Placement, fastest: bool, candidate: Candidate) -> Placement:
    """``candidate``'s plan (``FASTEST``) where ``fastest``, else ``placement`` (``KEPT``)."""
    if not fastest:
        return _marked(placement, KEPT)
    return Placement(candidate.queues, placement.status, finish_s=candidate.finishes, at_once=FASTEST)


def _marked(placement: Placement, verdict: str) -> Placement:
    """``placement`` saying ``verdict`` (itself where it already does)."""
    return placement if placement.at_once == verdict else replace(placement, at_once=verdict)


def _within_slots(problem: Problem) -> bool:
    """Whether the pool has a slot for every trajectory: without one, some queue runs in waves.
    Counted as the batch's trajectories, which its units partition: summing the units' members took
    0.2 ms at 4,096 x 32, once or more in every plan with quantiles, past its deadline too."""
    slots = sum(problem.costs[w].max_num_seqs for w in problem.active)
    return len(problem.steps) <= slots


def _runs_at_once(problem: Problem, queues: Sequence[Sequence[int]], reserve: bool) -> bool:
    """Whether every queue runs at once on the planned lengths (``ends_at_once``). A slot for every
    trajectory is not enough: long chain-of-thought fills the caches first, its queues run in waves,
    and draws of them are played by the event loop (~10 ms a queue a draw), which spent 0.85 s of
    an 80 ms plan on a 4,096-trajectory headline step before ``fastest_first`` found no candidate."""
    return all(problem.runs_at_once(queues, reserve))  # kept from the orders' hedge of the same plan


def _timed(
    problem: Problem, queues: Sequence[Sequence[int]], draws: LazyDraws, reserve: bool, deadline: float
) -> tuple[FloatArray, float] | None:
    """``queues``' ``outlier_means`` on the first ``TIMED`` draws and what one draw took; None when
    the plays the comparison needs before a verdict can be clear (``CLEAR`` draws of both plans, the
    ``TIMED`` aside) would end past ``deadline`` at that pace.

    Checked before the candidate is built (building it and playing a first draw only to give up
    cost 14-16 ms of every 80 ms plan at 1,024 trajectories). Building and ordering the candidate
    are not in it: they must end that long before ``deadline`` (``fastest_first`` gives up once its
    own pace projects past that; at 4,096 x 32 it took 31 ms and the plays 95 ms, where the
    projection counted only the plays and the plan ended 52 ms past its 250 ms)."""
    started = clock.now()
    head = outlier_means(problem, queues, draws.block(0, TIMED), reserve)
    now = clock.now()
    draw_s = (now - started) / TIMED
    if now + (2 * CLEAR - TIMED) * draw_s > deadline:
        return None
    return head, draw_s


LATE: list[list[int]] = []  # ``_fastest``'s answer where it gave up at its pace (compared by identity)


def fastest_first(problem: Problem, deadline: float = math.inf) -> list[list[int]] | None:
    """Unit indices per worker, the longest units on the fastest kind while its queues still run at
    once (module doc); None where some unit fits no allowed worker at once, with one kind, or once
    it would end past ``deadline`` at its own pace (checked every ``PACE_EVERY`` units)."""
    placed = _fastest(problem, deadline)
    return None if placed is LATE else placed


def _fastest(problem: Problem, deadline: float) -> list[list[int]] | None:
    """``fastest_first``, with ``LATE`` where it gave up at its pace: the hedge tells a plan it could
    not judge (``UNJUDGED``) from one with no candidate to weigh (``KEPT``)."""
    kinds = worker_kinds(problem.costs, problem.active)
    if len(kinds) < 2 or not _within_slots(problem):
        return None  # one kind: nothing to choose; more trajectories than slots: waves, not at once
    kinds.sort(key=lambda members: problem.costs[members[0]].step_time(1, 0.0))
    if problem.unrestricted and len(problem.units) == len(problem.steps):  # the service's: written out
        plain, gave_up = plain_fastest(problem, kinds, deadline)
        return LATE if gave_up else plain
    heaps = [[(0.0, w) for w in members] for members in kinds]  # (estimate, worker) per kind
    kind_of = {w: k for k, members in enumerate(kinds) for w in members}
    coefficients = {w: rates(problem.costs[w]) for w in kind_of}  # hashing a cost each unit: ~9 ms at 1,024
    peaks = KvPeaks(problem)
    loads = [Load() for _ in problem.costs]
    placed: list[list[int]] = [[] for _ in problem.costs]
    started, units = clock.now(), len(problem.units)
    for k, u in enumerate(problem.ranked or longest_first(problem.units)):
        if k % PACE_EVERY == 0 and past(started, k, units, deadline):
            return LATE
        unit = problem.units[u]
        worker = _take_fitting(problem, heaps, peaks, unit)
        if worker is None:
            return None
        peaks.add(worker, unit)
        loads[worker].add(unit)
        placed[worker].append(u)
        if peaks.count[worker] < peaks.slots[worker]:  # a worker out of slots takes nothing more
            load = loads[worker]
            after = estimate(coefficients[worker], load.steps, load.tokens, load.kv_steps, load.prompt_tokens)
            heapq.heappush(heaps[kind_of[worker]], (after, worker))
    return placed


def _take_fitting(
    problem: Problem, heaps: list[list[tuple[float, int]]], peaks: KvPeaks, unit: Unit
) -> int | None:
    """The least-loaded allowed worker of the fastest kind whose queue still runs at once with
    ``unit`` added, taken off its kind's heap (the caller puts it back); None when no kind has
    one. Workers passed over go back on their heap: a shorter unit may still fit them."""
    allowed = set(unit.allowed) if not problem.unrestricted else None
    for heap in heaps:
        passed: list[tuple[float, int]] = []
        found = None
        while heap:
            entry = heapq.heappop(heap)
            w = entry[1]
            fits = peaks.count[w] + len(unit.members) <= peaks.slots[w]
            if fits and (allowed is None or w in allowed) and peaks.peak_after(w, unit) <= peaks.limit[w]:
                found = w
                break
            passed.append(entry)
        for entry in passed:
            heapq.heappush(heap, entry)
        if found is not None:
            return found
    return None

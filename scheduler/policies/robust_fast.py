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
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from scheduler import clock
from scheduler.at_once import ends_at_once
from scheduler.finish_draws import drawn_finishes
from scheduler.lognormal import bounded_lengths
from scheduler.policies.base import Placement
from scheduler.policies.kvpeak import KvPeaks
from scheduler.policies.load import Load, time_with
from scheduler.policies.ordering import order_queues
from scheduler.policies.problem import Problem, Unit, longest_first, worker_kinds
from scheduler.policies.robust import SAMPLES, Z90, Spread, draw_matrix, least_mean
from scheduler.stepsum import FloatArray, planned_steps_array
from scheduler.types import PlanRequest

PACE_EVERY = 32  # units placed between checks of the candidate's projected end (a clock read is
# far cheaper than placing 32 units: a heap pass and a KV peak each)
PLAYS = 2 * SAMPLES  # draws played per comparison: two candidates (each draw with its stretched copy)
TIMED = 4  # draws of the policy's plan played and timed before the comparison is committed to
CHECK_COST = 1.0  # lpt phases the at-once check and the first ``TIMED`` draws take together, the part
# of the hedge played before its own pace is known: 0.7-1.0 at 4,096 x 32, 0.6-0.9 at 16,384 x 128


def at_once_hedge(
    problem: Problem,
    request: PlanRequest,
    placement: Placement,
    spread: Spread | None,
    deadline: float,
    lpt_phase_s: float = 0.0,
) -> Placement:
    """``placement``, or the fastest-kind-first plan (``fastest_first``) where the batch runs at once
    and that plan is expected to end sooner over draws of the lengths with one outlier
    (``outlier_means``); ``placement`` without quantiles, with one kind, where the batch does not run
    at once, or when the draws would not fit ``deadline`` (judged before anything is checked when
    less than ``CHECK_COST`` lpt phases of ``lpt_phase_s`` seconds are left). The candidate runs at
    once, so there is no order to hedge (``robust_order`` leaves such queues alone).

    Why the price. The at-once check and the first draws are what tell the hedge its pace, so
    they were started whenever the deadline had not passed: 3-130 ms (4,096 x 16 to 16,384 x
    1,024) of plans already near their budget, and on a loaded host 100-200 ms that ended 16,384 x
    128 plans at 1,020-1,090 ms of 1 s. They cost about one lpt phase, measured on the same host
    at the start of the same plan."""
    if spread is None or not _within_slots(problem) or len(worker_kinds(problem.costs, problem.active)) < 2:
        return placement
    if clock.now() + CHECK_COST * lpt_phase_s >= deadline:  # no draw could be played after the check
        return placement
    if not _runs_at_once(problem, placement.queues, request.kv_admission):
        return placement
    draws = outlier_draws(spread, request.seed)
    timed = _timed(problem, placement.queues, draws, request.kv_admission, deadline)
    if timed is None:
        return placement
    head, plays_s = timed
    built = deadline - plays_s  # what building and ordering the candidate must end by
    assignment = fastest_first(problem, built)
    if assignment is None:
        return placement
    queues, finishes = order_queues(problem, assignment, request.kv_admission, search_until=built)
    if queues == placement.queues or clock.now() > built:
        return placement  # the same plan, or ordering ran into the plays' time
    later = Draws(draws.steps[TIMED:], draws.stretch)
    rest = outlier_means(problem, placement.queues, later, request.kv_admission)
    fast = outlier_means(problem, queues, draws, request.kv_admission)
    if least_mean((np.concatenate((head, rest)), fast)) != 1:
        return placement
    return Placement(queues, placement.status, finish_s=finishes)


def _within_slots(problem: Problem) -> bool:
    """Whether the pool has a slot for every trajectory: without one, some queue runs in waves."""
    slots = sum(problem.costs[w].max_num_seqs for w in problem.active)
    return sum(len(u.members) for u in problem.units) <= slots


def _runs_at_once(problem: Problem, queues: Sequence[Sequence[int]], reserve: bool) -> bool:
    """Whether every queue runs at once on the planned lengths (``ends_at_once``). A slot for every
    trajectory is not enough: long chain-of-thought fills the caches first, its queues run in waves,
    and draws of them are played by the event loop (~10 ms a queue a draw), which spent 0.85 s of
    an 80 ms plan on a 4,096-trajectory headline step before ``fastest_first`` found no candidate."""
    busy = [(problem.costs[w], *problem.lengths(queue)) for w, queue in enumerate(queues) if queue]
    return all(ends is not None for ends in ends_at_once(busy, reserve))


def _timed(
    problem: Problem, queues: Sequence[Sequence[int]], draws: Draws, reserve: bool, deadline: float
) -> tuple[FloatArray, float] | None:
    """``queues``' ``outlier_means`` on the first ``TIMED`` draws and the seconds the comparison's
    other plays (``PLAYS`` in all, both candidates) are projected to take at their pace; None when
    those plays alone would end past ``deadline``.

    Checked before the candidate is built (building it and playing a first draw only to give up
    cost 14-16 ms of every 80 ms plan at 1,024 trajectories). A pass over more draws costs less per
    draw, so the projection errs long. Building and ordering the candidate are not in it: they must
    end that long before ``deadline`` (``fastest_first`` gives up once its own pace projects past
    that; at 4,096 x 32 it took 31 ms and the plays 95 ms, where the projection counted only the
    plays and the plan ended 52 ms past its 250 ms)."""
    started = clock.now()
    head = outlier_means(problem, queues, Draws(draws.steps[:TIMED], draws.stretch), reserve)
    now = clock.now()
    plays_s = (PLAYS - TIMED) * (now - started) / TIMED
    if now + plays_s > deadline:
        return None
    return head, plays_s


class Draws(NamedTuple):
    """What both candidates are played on (common random numbers: the comparison is not at the
    mercy of sampling noise): ``SAMPLES`` draws of every trajectory's steps from the request's seed
    (``draw_matrix``), and the steps of each when it is the outlier."""

    steps: npt.NDArray[np.int64]  # (draws, trajectories)
    stretch: npt.NDArray[np.int64]  # the batch's longest p90, within each trajectory's cap


def outlier_draws(spread: Spread, seed: int) -> Draws:
    """``SAMPLES`` draws of the lengths (``draw_matrix``) and the outlier's steps: the batch's longest
    p90 (why: ``outlier_means``), within each trajectory's cap."""
    medians, sigmas, caps = spread
    p90s = bounded_lengths(medians, sigmas, caps, np.full(len(medians), Z90))
    longest = planned_steps_array(p90s).max(initial=1)
    stretch = np.minimum(int(longest), planned_steps_array(caps))
    return Draws(draw_matrix(spread, np.random.default_rng(seed), SAMPLES), stretch)


def outlier_means(
    problem: Problem, queues: Sequence[Sequence[int]], draws: Draws, reserve: bool
) -> FloatArray:
    """Mean makespan of ``queues`` on each draw in which one trajectory, equally likely any, runs as
    long as the batch's longest p90 (``draws.stretch``).

    Why the outlier: the draws alone trust each trajectory's p90, and on math100 the longest sample
    ran 3.8x its median, 28 of its own sigmas out; the predictor's p90 covered 84% of the samples.
    With one trajectory that long somewhere in the batch, a plan pays for it on the worker it lands
    on, which is what the comparison needs to see. Exact over where it lands: each worker's finish
    with its longest drawn trajectory stretched (a worker that runs at once ends with its longest,
    and which of its trajectories runs long barely matters), weighed by the worker's share of the
    batch, against the other workers' finishes on the draw itself. Every draw in one vectorised
    pass (``drawn_finishes``), each value the one a play of that draw gives, to the last bit.
    """
    drawn, stretched = drawn_finishes(
        problem.costs, problem.prompts, queues, draws.steps, draws.stretch, reserve
    )
    rows = np.arange(len(drawn))
    last = np.argmax(drawn, axis=1)  # the worker that ends the draw (the first of equals)
    first = drawn[rows, last]
    others = drawn.copy()
    others[rows, last] = -np.inf
    second = others.max(axis=1) if drawn.shape[1] > 1 else np.zeros(len(drawn))
    weighed = np.zeros(len(drawn))
    for w, queue in enumerate(queues):  # in worker order, one addition at a time, as a sum() of them
        weighed = weighed + len(queue) * np.maximum(stretched[:, w], np.where(last == w, second, first))
    total = sum(len(queue) for queue in queues)
    return weighed / total if total else np.zeros(len(drawn))


def fastest_first(problem: Problem, deadline: float = math.inf) -> list[list[int]] | None:
    """Unit indices per worker, the longest units on the fastest kind while its queues still run at
    once (module doc); None where some unit fits no allowed worker at once, with one kind, or once
    it would end past ``deadline`` at its own pace (checked every ``PACE_EVERY`` units)."""
    kinds = worker_kinds(problem.costs, problem.active)
    if len(kinds) < 2 or not _within_slots(problem):
        return None  # one kind: nothing to choose; more trajectories than slots: waves, not at once
    kinds.sort(key=lambda members: problem.costs[members[0]].step_time(1, 0.0))
    heaps = [[(0.0, w) for w in members] for members in kinds]  # (estimate, worker) per kind
    peaks = KvPeaks(problem)
    loads = [Load() for _ in problem.costs]
    placed: list[list[int]] = [[] for _ in problem.costs]
    started, units = clock.now(), len(problem.units)
    for k, u in enumerate(problem.ranked or longest_first(problem.units)):
        if k % PACE_EVERY == 0 and _past(started, k, units, deadline):
            return None
        unit = problem.units[u]
        worker = _take_fitting(problem, heaps, peaks, unit)
        if worker is None:
            return None
        peaks.add(worker, unit)
        loads[worker].add(unit)
        placed[worker].append(u)
        if peaks.count[worker] < peaks.slots[worker]:  # a worker out of slots takes nothing more
            heap = next(h for h, members in zip(heaps, kinds, strict=True) if worker in members)
            heapq.heappush(heap, (time_with(problem.costs[worker], loads[worker]), worker))
    return placed


def _past(started: float, placed: int, units: int, deadline: float) -> bool:
    """Whether placing ``units`` units, ``placed`` of them placed since ``started``, ends past
    ``deadline`` at the pace so far (or the deadline has passed already)."""
    now = clock.now()
    return now > deadline or (placed > 0 and started + (now - started) * units / placed > deadline)


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

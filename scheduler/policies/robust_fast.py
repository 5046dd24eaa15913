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
that run in waves are what the rest of the planner is for (the long chain-of-thought headline
never gets here). ``at_once_hedge`` plays it against the plan ``lpt`` or ``cpsat`` would otherwise
return over common draws of the lengths, each with one trajectory running as long as the batch's
longest p90 (``with_outlier``), and keeps the one expected to end sooner.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from scheduler import clock
from scheduler.finish import queue_finishes
from scheduler.policies.base import Placement
from scheduler.policies.kvpeak import KvPeaks
from scheduler.policies.load import Load, time_with
from scheduler.policies.ordering import order_queues
from scheduler.policies.problem import Problem, Unit, longest_first, worker_kinds
from scheduler.policies.robust import SAMPLES, Z90, Spread, draw_steps
from scheduler.stepsum import planned_steps_array
from scheduler.types import PlanRequest

CHECK_EVERY = 512  # units placed between deadline checks
PLAYS = 4 * SAMPLES  # batch plays per comparison: two candidates, each on a draw and its stretched copy


def at_once_hedge(
    problem: Problem, request: PlanRequest, placement: Placement, spread: Spread | None, deadline: float
) -> Placement:
    """``placement``, or the fastest-kind-first plan (``fastest_first``) where the batch runs at once
    and that plan is expected to end sooner over draws of the lengths with one outlier
    (``with_outlier``); ``placement`` without quantiles, with one kind, where the batch does not run
    at once, or when the draws would not fit ``deadline``. The candidate runs at once, so there is
    no order to hedge (``robust_order`` leaves such queues alone)."""
    if spread is None or not _within_slots(problem):
        return placement
    if not _draws_fit(problem, placement, spread, request, deadline):
        return placement
    assignment = fastest_first(problem, deadline)
    if assignment is None:
        return placement
    queues, finishes = order_queues(problem, assignment, request.kv_admission, search_until=deadline)
    if queues == placement.queues:
        return placement
    candidates = (placement.queues, queues)
    if with_outlier(problem, candidates, spread, request.kv_admission, request.seed, deadline) != 1:
        return placement
    return Placement(queues, placement.status, finish_s=finishes)


def _within_slots(problem: Problem) -> bool:
    """Whether the pool has a slot for every trajectory: without one, some queue runs in waves."""
    slots = sum(problem.costs[w].max_num_seqs for w in problem.active)
    return sum(len(u.members) for u in problem.units) <= slots


def _draws_fit(
    problem: Problem, placement: Placement, spread: Spread, request: PlanRequest, deadline: float
) -> bool:
    """Whether the comparison's plays (``PLAYS`` plays of the batch) would end before ``deadline``,
    timed on one play of ``placement``. Checked before the candidate is built: under the service's
    80 ms default at 1,024 trajectories they never fit, and building the candidate and playing a
    first draw only to find that out cost 14-16 ms of every plan."""
    started = clock.now()
    steps = draw_steps(spread, np.random.default_rng(request.seed))
    queue_finishes(problem.costs, problem.prompts, steps, placement.queues, request.kv_admission)
    now = clock.now()
    return now + PLAYS * (now - started) <= deadline


def with_outlier(
    problem: Problem,
    candidates: Sequence[Sequence[Sequence[int]]],
    spread: Spread,
    reserve: bool,
    seed: int,
    deadline: float,
) -> int | None:
    """Index of the candidate with the least mean makespan over ``SAMPLES`` draws of the lengths in
    each of which one trajectory, equally likely any, runs as long as the batch's longest p90;
    None when the draws would not fit before ``deadline`` (judged after each, from their pace).

    Why the outlier: the draws alone trust each trajectory's p90, and on math100 the longest sample
    ran 3.8x its median, 28 of its own sigmas out; the predictor's p90 covered 84% of the samples.
    With one trajectory that long somewhere in the batch, a plan pays for it on the worker it lands
    on, which is what the comparison needs to see. Exact over where it lands, per draw: each
    worker's finish with its longest drawn trajectory stretched (``_stretched``), weighed by the
    worker's share of the batch, against the other workers' finishes on the draw itself.
    """
    rng = np.random.default_rng(seed)
    medians, sigmas, caps = spread
    longest = planned_steps_array(np.minimum(caps, medians * np.exp(sigmas * Z90))).max(initial=1)
    limits = planned_steps_array(caps)
    totals = [0.0] * len(candidates)
    started = clock.now()
    for k in range(SAMPLES):
        means = _with_one_long(problem, candidates, draw_steps(spread, rng), int(longest), limits, reserve)
        totals = [total + mean for total, mean in zip(totals, means, strict=True)]
        if started + SAMPLES * (clock.now() - started) / (k + 1) > deadline:
            return None  # projected from the pace so far: at most one draw is played past it
    return min(range(len(candidates)), key=lambda c: (totals[c], c))


def _with_one_long(
    problem: Problem,
    candidates: Sequence[Sequence[Sequence[int]]],
    steps: list[int],
    longest: int,
    limits: npt.NDArray[np.int64],
    reserve: bool,
) -> list[float]:
    """Each candidate's mean makespan on ``steps`` with one trajectory, equally likely any, stretched
    to ``longest`` steps (within its cap ``limits``): the outlier on worker ``w`` makes the makespan
    the larger of ``w``'s stretched finish and every other worker's finish on ``steps``. All plays
    in one ``queue_finishes`` call (each candidate's queues on ``steps``, then on its stretched
    copy of them): per call, its set-up costs about what playing 400 trajectories does."""
    workers = len(problem.costs)
    every_steps, every_queues = list(steps), []
    for queues in candidates:
        base = len(every_steps)
        every_steps += _stretched(queues, steps, longest, limits)
        every_queues += [*queues, *([i + base for i in queue] for queue in queues)]
    copies = len(every_steps) // len(steps)
    finishes = queue_finishes(
        problem.costs * (2 * len(candidates)), problem.prompts * copies, every_steps, every_queues, reserve
    )
    means = []
    for c, queues in enumerate(candidates):
        drawn = finishes[2 * c * workers : (2 * c + 1) * workers]
        stretched = finishes[(2 * c + 1) * workers : (2 * c + 2) * workers]
        last = max(range(workers), key=lambda w: drawn[w])
        first, second = drawn[last], max((f for w, f in enumerate(drawn) if w != last), default=0.0)
        total = sum(len(queue) for queue in queues)
        weighed = sum(
            len(q) * max(stretched[w], second if w == last else first) for w, q in enumerate(queues)
        )
        means.append(weighed / total if total else 0.0)
    return means


def _stretched(
    queues: Sequence[Sequence[int]], steps: list[int], longest: int, limits: npt.NDArray[np.int64]
) -> list[int]:
    """``steps`` with every queue's longest trajectory run to ``longest`` (within its cap), where it
    is shorter. The longest, so that a queue holds at most one more long trajectory: a worker that
    runs at once ends with its longest, and which of its trajectories runs long barely matters."""
    out = list(steps)
    for queue in queues:
        if queue:
            i = max(queue, key=lambda j: steps[j])
            out[i] = max(out[i], min(longest, int(limits[i])))
    return out


def fastest_first(problem: Problem, deadline: float = math.inf) -> list[list[int]] | None:
    """Unit indices per worker, the longest units on the fastest kind while its queues still run at
    once (module doc); None where some unit fits no allowed worker at once, with one kind, or once
    past ``deadline`` (checked every ``CHECK_EVERY`` units)."""
    kinds = worker_kinds(problem.costs, problem.active)
    if len(kinds) < 2 or not _within_slots(problem):
        return None  # one kind: nothing to choose; more trajectories than slots: waves, not at once
    kinds.sort(key=lambda members: problem.costs[members[0]].step_time(1, 0.0))
    heaps = [[(0.0, w) for w in members] for members in kinds]  # (estimate, worker) per kind
    peaks = KvPeaks(problem)
    loads = [Load() for _ in problem.costs]
    placed: list[list[int]] = [[] for _ in problem.costs]
    for k, u in enumerate(problem.ranked or longest_first(problem.units)):
        if k % CHECK_EVERY == 0 and clock.now() > deadline:
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

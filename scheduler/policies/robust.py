"""Choosing between finished plans by their expected makespan, when the predictions say how unsure
they are.

Why. ``cpsat`` minimises the makespan on point predictions, and the best plan on predictions can be
the worst bet on the truth. On the real math100 trace (4 x H100) its plan was 4% faster than
``lpt``'s on the predictions (10.41 s against 10.84 s) by giving three workers one or two of the
longest-predicted trajectories each and the fourth the other 396. The makespan on the true lengths
was one trajectory predicted at 554 tokens and 2,107 long, and it ran on the crowded worker, whose
every step reads ~4x the KV of an even split: 18.9 s against ``lpt``'s 16.7 s. Which trajectory will
overrun is unknown; that some will, and that it costs most on a crowded worker, is what the
predictions' quantiles say.

How. When every trajectory carries its 0.5 and 0.9 quantiles, its length is taken as log-normal
through them (``sigma = ln(p90 / p50) / z_0.9``, held within one token and its generation limit,
never overflowing whatever the quantiles: ``scheduler.lognormal``), ``SAMPLES`` draws of the whole
batch are played through every candidate's queues with the planner's own worker model
(``scheduler.finish``), and the candidate with the least mean makespan is chosen. The draws are the
same for every candidate (common random numbers: the comparison is not at the mercy of sampling
noise) and come from the request's seed, so the choice is deterministic. On math100 the means
track the true outcome: ``lpt`` 16.76 s (true 16.73 s), ``cpsat``'s plan 17.98 s (true 18.9 s).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from scheduler import clock, giveup
from scheduler.finish_draws import BoolArray, draw_finishes, estimated_finishes, longest_alone, replay_cells
from scheduler.lognormal import Z90 as Z90  # the standard normal's 0.9 quantile, for robust_fast
from scheduler.lognormal import bounded_lengths, sigma_through, sigmas_through
from scheduler.policies.plan_draws import SAMPLES as SAMPLES  # the draws a comparison plays at most
from scheduler.policies.plan_draws import Spread as Spread
from scheduler.policies.plan_draws import draw_matrix as draw_matrix
from scheduler.policies.problem import Problem
from scheduler.stepsum import FloatArray, planned_steps_array
from scheduler.types import Trajectory

MIN_SAMPLES = 4  # the fewest: played and timed first, and all a large batch's comparison affords.
# At 16,384 x 128 a draw of a plan costs ~10-20 ms (queues at once, vectorised, and those in waves
# through the event loop), so 32 draws of both plans took ~1.2 s of a 1 s plan; and the more
# trajectories a draw has, the less its makespan moves from one draw to the next
SLACK = 1.1  # an estimate of a play (``finish_draws.estimated_finishes``) is taken to lie within
# this factor of it either way once its queue is checked (``_Estimates``; measured 0.95-1.08 on the
# bench batches at p90/p50 1.2 and 1.6, 1.22-2.81 on math100's queue in waves)
JUDGE_SHARE = 0.25  # of the time left when the lpt plan's draws start, what both plans' draws may take
BLOCK = 1 << 21  # elements of one pass over draws (``makespans``): 16 MiB an array of them
GIVE_UP_EVERY = 512  # trajectories between ``spreads``' checks of the caller's hard deadline


def spreads(trajectories: Sequence[Trajectory]) -> Spread | None:
    """Medians, log-normal sigmas and caps of every trajectory; None unless all carry p50 and p90.

    Gives up past the caller's hard deadline (``scheduler.giveup``), checked before each
    ``GIVE_UP_EVERY`` trajectories read (read one at a time, 4,096 took 20-80 ms on a starved host).
    A block's quantiles are read in comprehensions and the sigmas computed at once, not a Python call
    a trajectory (``lognormal.sigmas_through``: the scalar's floats to the bit; 4,096 in ~1.7 ms, not
    ~2.9 ms). Int quantiles take the scalar, whose ratio of ints is exact where floats' is not."""
    lows: list[float] = []
    highs: list[float] = []
    plain = True  # every quantile a float (an int's ratio is Python's exact one: the scalar gives it)
    for start in range(0, len(trajectories), GIVE_UP_EVERY):
        giveup.check()
        quantiles = [t.quantiles for t in trajectories[start : start + GIVE_UP_EVERY]]
        p50s, p90s = [q.get(0.5) for q in quantiles], [q.get(0.9) for q in quantiles]
        kinds = set(map(type, p50s))
        kinds.update(map(type, p90s))
        if type(None) in kinds:
            return None
        plain = plain and kinds <= {float}
        lows.extend(p50s)  # type: ignore[arg-type]  # no None: the kinds say so
        highs.extend(p90s)  # type: ignore[arg-type]
    count = len(lows)
    medians = np.fromiter(lows, dtype=np.float64, count=count)
    if plain:  # finite for any quantiles (scheduler.lognormal)
        sigmas = sigmas_through(medians, np.fromiter(highs, dtype=np.float64, count=count))
    else:
        pairs = zip(lows, highs, strict=True)
        sigmas = np.fromiter((sigma_through(*pair) for pair in pairs), dtype=np.float64, count=count)
    caps = np.fromiter((t.max_new_tokens for t in trajectories), dtype=np.float64, count=count)
    return medians, sigmas, caps


def draw_steps(spread: Spread, rng: np.random.Generator) -> list[int]:
    """One draw of every trajectory's decode steps: log-normal through its p50 and p90, within its cap."""
    medians, sigmas, caps = spread
    lengths = bounded_lengths(medians, sigmas, caps, rng.standard_normal(len(medians)))
    steps: list[int] = planned_steps_array(lengths).tolist()
    return steps


def least_expected(
    problem: Problem,
    candidates: Sequence[Sequence[Sequence[int]]],
    spread: Spread,
    reserve: bool,
    seed: int,
    deadline: float,
) -> int | None:
    """Index of the candidate (queues per worker) with the least mean makespan over ``SAMPLES``
    draws of the lengths, the first of equals; None when the draws would not fit before
    ``deadline`` (judged after the first, which all candidates play).

    Each candidate's draws are played a block at a time (``draw_finishes``), each finish the one a
    play of that draw gives to the last bit, and the makespans summed in draw order: the same sums,
    so the same choice, as playing one draw at a time, which spent most of its time setting up
    each play (a 1 s cpsat plan of 128 x 4 with quantiles: ~24 ms on the comparison, ~3 ms now).
    The draws are the plan's own (``Problem.draws``): drawn once whoever asks first."""
    draws = problem.draws(spread, seed).rows(SAMPLES)
    started = clock.now()
    first = [makespans(problem, queues, draws[:1], reserve) for queues in candidates]
    if started + SAMPLES * (clock.now() - started) > deadline:
        return None
    return least_mean(
        [
            np.concatenate((head, makespans(problem, queues, draws[1:], reserve)))
            for head, queues in zip(first, candidates, strict=True)
        ]
    )


class Baseline(NamedTuple):
    """The lpt plan's side of the robust choice (``baseline``): the draws both plans are judged on,
    the lpt plan's makespan on each (the first ``MIN_SAMPLES`` played before the search, for the
    pace; the rest by ``completed`` if a plan that differs is judged), and the time the search keeps
    back for those plays and its own plan's."""

    queues: tuple[tuple[int, ...], ...]  # the lpt plan's
    draws: npt.NDArray[np.int64]  # (draws, trajectories): steps
    makespans: FloatArray  # the lpt plan's, one a draw: the first MIN_SAMPLES until ``completed``
    cost_s: float  # ``clock`` seconds one plan's plays on every draw take (measured, or projected)
    pending_s: float = 0.0  # projected seconds of the lpt plan's plays still to make (``completed``)


def baseline(
    problem: Problem,
    queues: Sequence[Sequence[int]],
    spread: Spread,
    reserve: bool,
    seed: int,
    deadline: float,
) -> Baseline:
    """``queues`` (the lpt plan) played on the first draws of ``least_expected``'s, as many of its
    ``SAMPLES`` as the pace of the first ``MIN_SAMPLES`` lets both plans' plays fit in
    ``JUDGE_SHARE`` of the time left before ``deadline``, and never fewer than ``MIN_SAMPLES``.

    Why. The search used to keep ``SAMPLES`` lpt phases for the choice, a guess at the plays' cost
    (one lpt phase a draw) that at 4,096 x 32 and above exceeded the whole budget: with quantiles
    the band search never started (the service's plans, always ``FALLBACK_LPT``, 1.20-1.40x the
    bound where the search reaches 1.03-1.04x). The cost is measured here instead. On a frozen
    clock (the replay) every draw fits, and the choice is ``least_expected``'s to the last bit.

    Only the first ``MIN_SAMPLES`` draws are played here, for the pace; the rest are played by
    ``completed`` when a searched plan that differs is judged, and their projected time
    (``pending_s``) is kept back with the searched plan's plays. Most searches return the lpt plan
    itself (the long chain-of-thought headline's always do), and playing all 32 up front doubled
    its replay's planning time (3.0 -> 6.0 s a step) for a choice never made."""
    draws = problem.draws(spread, seed).rows(SAMPLES)  # the plan's own (``Problem.draws``)
    started = clock.now()
    head = makespans(problem, queues, draws[:MIN_SAMPLES], reserve)
    now = clock.now()
    pace = (now - started) / MIN_SAMPLES  # seconds one draw of one plan takes
    count = SAMPLES
    if pace > 0:
        count = max(MIN_SAMPLES, int(min(SAMPLES, JUDGE_SHARE * (deadline - now) / (2 * pace))))
    played = tuple(tuple(queue) for queue in queues)
    pending = pace * (count - MIN_SAMPLES)
    return Baseline(played, draws[:count], head, now - started + pending, pending)


def completed(problem: Problem, base: Baseline, reserve: bool) -> Baseline:
    """``base`` with the lpt plan played on every one of its draws (``baseline`` plays the first
    ``MIN_SAMPLES`` only)."""
    done = len(base.makespans)
    if done == len(base.draws):
        return base
    rest = makespans(problem, base.queues, base.draws[done:], reserve)
    return base._replace(makespans=np.concatenate((base.makespans, rest)), pending_s=0.0)


def judged(
    problem: Problem,
    queues: Sequence[Sequence[int]],
    base: Baseline,
    reserve: bool,
    deadline: float,
    points: Sequence[float],
) -> bool | None:
    """Whether ``queues`` (point finishes ``points``) is expected to end no later than the lpt plan
    of ``base`` over its draws (ties: ``queues``, as ``least_expected`` chooses); None when the
    plays that would settle it might end past ``deadline``.

    Why. A draw of queues that run at once is one vectorised pass, but a band plan's lowest bands
    run in waves and its middle queues, packed to their caches, run past them on some draws: both
    go through the event loop, 100-150 ms a draw of a 4,096 x 32 band plan under KV admission, so
    its draws never fitted what the search left and the plan was thrown away (``FALLBACK_LPT``)
    where it was the better bet. How. Every draw is estimated without the event loop
    (``estimated_finishes``), each estimate taken to lie within ``SLACK`` of its play once its
    queue is checked (``_Estimates``); the verdict stands when it holds at both ends of those
    ranges, and otherwise the estimates that may decide a draw's makespan are played, the highest
    first, until it does. With every cell played it is the comparison over every play, as before."""
    if clock.now() + base.pending_s + base.cost_s > deadline:
        return None
    base = completed(problem, base, reserve)
    scaled: list[int] = []
    values, approx = estimated_finishes(
        problem.costs, problem.prompts, queues, base.draws, reserve, problem.steps, points, scaled
    )
    shown = np.nonzero(approx.any(axis=0))[0].tolist()
    floors = longest_alone(problem.costs, problem.prompts, queues, base.draws, shown)
    known = _Estimates(values, approx, floors, scaled)
    # the longest one play took so far, at first one draw's share of a plan's plays (unpriced, the
    # first play was started with any time left): the next may take as long
    slowest = base.cost_s / max(1, len(base.draws))
    while (cell := known.next_play(base.makespans)) is not None:
        started = clock.now()
        if started + slowest > deadline:
            return None
        where = np.zeros(approx.shape, dtype=bool)
        where[cell] = True
        estimate = float(values[cell])
        replay_cells(problem.costs, problem.prompts, queues, base.draws, values, where, reserve)
        known.played(cell, estimate)
        slowest = max(slowest, clock.now() - started)
    return known.verdict(base.makespans)


class _Estimates:
    """``judged``'s cells: played (``approx`` off: exact) or estimated, and what each estimate is
    worth. An estimate is trusted within ``SLACK`` of its play only once one of its queue's
    estimates has been played and found there (checked before a verdict for ``queues`` rests on
    it); a queue whose play fell outside, or whose ``floors`` (valid lower bounds of each play)
    pass an estimate's ``SLACK``, is not trusted at all: its cells lie anywhere from their floors
    up until played.

    Why. The estimates were measured within SLACK on the bench batches, but a queue in waves is
    estimated by its total work, and on the real math100 trace one long drawn item set its finish:
    1.22-2.81x its estimates, and the verdict settled on them chose a plan 13% slower (18.9 s
    against lpt's 16.73 s). Checking every queue would cost one play each; a queue in waves is
    checked when its cells may decide a draw's makespan, before a verdict rests on them. A queue
    kept at its closed form past its cache is not played to check it (the closed form runs every
    item to its own drawn length, only preemption is missing: 0.99-1.08 of the plays on the bench
    batches): at 4,096 x 32 under KV admission those checks took 3-6 plays, 25-35 ms of the ~65
    left, and 2 of 5 band plans ran out of time (``FALLBACK_LPT``). Its floors still apply."""

    def __init__(
        self, values: FloatArray, approx: BoolArray, floors: FloatArray, scaled: Sequence[int]
    ) -> None:
        self.values, self.approx, self.floors = values, approx, floors
        self.checked: BoolArray = np.ones(values.shape[1], dtype=bool)
        self.checked[list(scaled)] = False  # closed forms: an at-once run's own arithmetic
        self.trusted: BoolArray = np.logical_not((approx & (floors > values * SLACK)).any(axis=0))

    def bounds(self) -> tuple[FloatArray, FloatArray]:
        """Each cell's lowest and highest possible play."""
        trusted = self.approx & self.trusted[None, :]
        loose = self.approx & ~self.trusted[None, :]
        low = np.where(trusted, np.maximum(self.values / SLACK, self.floors), self.values)
        high = np.where(trusted, self.values * SLACK, self.values)
        return np.where(loose, self.floors, low), np.where(loose, np.inf, high)

    def verdict(self, theirs: FloatArray) -> bool | None:
        """True (ours no later on average) or False where every cell within its bounds gives it."""
        low, high = self.bounds()
        if least_mean((high.max(axis=1, initial=0.0), theirs)) == 0:
            return True
        if least_mean((low.max(axis=1, initial=0.0), theirs)) == 1:
            return False
        return None

    def next_play(self, theirs: FloatArray) -> tuple[int, int] | None:
        """The cell to play next, None once the verdict stands (for ``queues``: on checked
        estimates): while it does not, the highest estimate that may decide its draw's makespan;
        once ``queues`` wins on estimates, the highest estimate of an unchecked queue whose cells
        may decide a draw. A verdict against ``queues`` is not checked: it keeps the lpt plan, the
        one kept whenever the judge cannot finish, so an estimate wrong there costs a gain the
        search promised, never a plan worse than lpt's (math100's was 13% worse)."""
        low, high = self.bounds()
        deciding = self.approx & (high > low.max(axis=1, initial=0.0)[:, None])
        rank = np.where(self.trusted[None, :], self.values, np.maximum(self.values, self.floors))
        verdict = self.verdict(theirs)
        if verdict is False:
            return None  # the lpt plan stands, as when nothing is judged
        if verdict:
            deciding &= ~self.checked[None, :] & self.trusted[None, :]
            if not deciding.any():
                return None
            queue = int(np.argmax(np.where(deciding, rank, -np.inf).max(axis=0)))
            deciding = self.approx & (np.arange(len(self.checked)) == queue)[None, :]
        ranked = np.where(deciding if deciding.any() else self.approx, rank, -np.inf)
        d, w = np.unravel_index(int(np.argmax(ranked)), ranked.shape)
        return int(d), int(w)

    def played(self, cell: tuple[int, int], estimate: float) -> None:
        """``cell`` now exact; its queue checked, and trusted no more where it lay past ``SLACK``."""
        self.approx[cell] = False
        w = cell[1]
        self.checked[w] = True
        if not estimate / SLACK <= self.values[cell] <= estimate * SLACK:
            self.trusted[w] = False


def makespans(
    problem: Problem, queues: Sequence[Sequence[int]], draws: npt.NDArray[np.int64], reserve: bool
) -> FloatArray:
    """The makespan of ``queues`` on each draw: as many draws a pass as keep the block (draws x
    workers x longest queue) within ``BLOCK`` elements, so a crowded queue costs memory in
    proportion to itself, not to the number of draws."""
    per_draw = len(queues) * max((len(q) for q in queues), default=0)
    size = max(1, BLOCK // max(1, per_draw))
    parts = [
        draw_finishes(problem.costs, problem.prompts, queues, draws[k : k + size], reserve).max(
            axis=1, initial=0.0
        )
        for k in range(0, len(draws), size)
    ]
    return np.concatenate(parts) if parts else np.zeros(0)


def least_mean(means: Sequence[FloatArray]) -> int:
    """Index of the candidate with the least mean over the draws (``means[c]``: one value a draw),
    the first of equals; the sum runs in draw order, one addition at a time."""
    totals = []
    for values in means:
        total = 0.0
        for value in values.tolist():
            total += value
        totals.append(total)
    return min(range(len(totals)), key=lambda c: (totals[c], c))

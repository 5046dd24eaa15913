"""The length-blind bar on the request's draws of the lengths: where it is asked, and playing only
what settles it.

Why ask the draws of a plan EARLIER than the blind one on the predictions. On the short-cot replay
(``trace synth --profile short-cot --prompts 256 --samples 16 --seed 1``, 8 H100 + 8 Ascend 910B,
steps 3-5) lpt's plans are ~30% earlier than round robin's on the predictions and put a high-spread
prompt's samples (p50 ~300, p90 ~1,300) on the Ascends, where one run to the 4,096 cap alone takes
58 s: 175.8 s against round robin's 109.5 s, which only the draws see. Why not for every plan: that
made the long chain-of-thought headline's 6-step replay ~4x slower (40.6 -> 175.9 s of planning),
every queue there running in waves through the event loop on every draw.

How. ``outlived`` asks the draws only where they can disagree with the predictions: where a
plan's single drawn items, decoded alone on their workers (``finish_draws.longest_alone``, a lower
bound of each play, one vectorised pass), outlast its predicted makespan on average. Then its
makespan on the draws is set by single items the predictions do not see, not by its queues' work.
On the short-cot steps the mean floor is 2.2-2.9x the plan's predicted makespan, on the headline's
0.23x. ``least_drawn`` then makes ``robust.least_expected``'s choice among the plan and the blind
plans without playing every draw of the plan's queues in waves: the blind plans are played in
full (at once there, a vectorised pass), the plan's cells that run at once take their closed form
(its play to the last bit), and its other cells start at their floors and are played one at a
time, the one estimated to raise its draw's makespan most first, until the plan's makespans at
their floors already lose to a blind plan, or every cell is played. Either way the choice is the
one every play gives.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from scheduler import clock
from scheduler.finish_draws import estimated_finishes, longest_alone, replay_cells
from scheduler.policies.load import rates
from scheduler.policies.problem import Problem
from scheduler.policies.robust import least_mean, makespans
from scheduler.stepsum import FloatArray

CHUNK = 8  # draws of a blind plan played between checks of the deadline (``_blinds_played``)
ROUNDING = 1e-9  # relative margin a plan's total of floors must clear: a floor is a lower bound of
# its play in exact arithmetic, and the play sums its step times another way


def outlived(
    problem: Problem,
    queues: Sequence[Sequence[int]],
    points: Sequence[float],
    draws: npt.NDArray[np.int64],
    deadline: float = math.inf,
) -> bool | None:
    """Whether the longest drawn item of some queue of ``queues``, decoded alone on its worker,
    outlasts the plan's predicted makespan (``points``: each worker's predicted finish) on average
    over ``draws``: the draws then disagree with the predictions (module doc), and only then does
    ``blindbar.barred`` judge a plan earlier on the predictions on them. None where its plays would
    end past ``deadline``: the first ``CHUNK`` draws are played, and the rest in one pass only where
    it ends by then at their pace (the same floors as one pass: each draw's row is its own).

    Why the price. One pass over every draw takes 2-18 ms at 1,024 x 16 on a loaded host, at the
    end of plans already near their budget (unpriced, hedge49 saw one start 10.9 ms past it;
    review49c). Two passes, not a chunk at a time: each pass walks every worker's queue, and chunks
    of 8 cost 2-3x the one pass (review49c)."""
    started, first = clock.now(), draws[:CHUNK]
    head = longest_alone(problem.costs, problem.prompts, queues, first, range(len(queues)))
    floors = [head.max(axis=1, initial=0.0)]
    rest, now = draws[CHUNK:], clock.now()
    if len(rest):
        if now + len(rest) * (now - started) / len(first) > deadline:
            return None
        tail = longest_alone(problem.costs, problem.prompts, queues, rest, range(len(queues)))
        floors.append(tail.max(axis=1, initial=0.0))
    return float(np.concatenate(floors).mean()) > max(points, default=0.0)


def least_drawn(
    problem: Problem,
    queues: Sequence[Sequence[int]],
    points: Sequence[float],
    blinds: Sequence[Sequence[Sequence[int]]],
    draws: npt.NDArray[np.int64],
    reserve: bool,
    deadline: float,
) -> int | None:
    """Index among (``queues``, *``blinds``) of the least mean makespan over ``draws``, the first of
    equals, as ``robust.least_expected`` chooses over every play; None when the plays would run past
    ``deadline`` (the blind plans' judged on their first draw, the plan's cells one at a time).

    ``points`` are ``queues``' predicted finishes, which order the plan's plays (module doc)."""
    started = clock.now()
    head = [makespans(problem, blind, draws[:1], reserve) for blind in blinds]
    pace = (clock.now() - started) / max(1, len(blinds))  # one draw of one plan
    if started + len(draws) * (clock.now() - started) > deadline:
        return None
    paced = _blinds_played(problem, blinds, head, draws, reserve, deadline, pace)
    if paced is None:
        return None
    theirs, pace = paced
    if clock.now() + len(draws) * pace > deadline:  # the plan's estimates: a pass over every draw
        return None
    return _plan_played(problem, queues, points, theirs, draws, reserve, deadline, pace)


def _plan_played(
    problem: Problem,
    queues: Sequence[Sequence[int]],
    points: Sequence[float],
    theirs: Sequence[FloatArray],
    draws: npt.NDArray[np.int64],
    reserve: bool,
    deadline: float,
    pace: float,
) -> int | None:
    """``least_drawn``'s choice once the blind plans' makespans (``theirs``) are known: the plan's
    cells that run at once in closed form, the others from their floors, played one at a time, the
    one estimated to raise its draw's makespan most first, until the plan loses to the best blind
    plan or every cell is played (module doc); None where the next play may end past ``deadline``
    (``pace``: the longest one play took so far)."""
    best = least_mean(theirs)
    values, approx = estimated_finishes(
        problem.costs, problem.prompts, queues, draws, reserve, problem.steps, points
    )
    shown = np.nonzero(approx.any(axis=0))[0].tolist()
    floors = np.maximum(
        longest_alone(problem.costs, problem.prompts, queues, draws, shown),
        work_floors(problem, queues, draws, shown),
    )
    slowest = pace  # the longest one play took so far (at first, a draw's): the next may take as long
    while approx.any():
        low = np.where(approx, floors, values).max(axis=1, initial=0.0)
        if least_mean((low / (1 + ROUNDING), theirs[best])) == 1:
            return 1 + best  # the plan's every play can only raise its makespans: it loses
        played = clock.now()
        if played + slowest > deadline:
            return None
        gain = np.where(approx, np.maximum(values, floors) - low[:, None], -np.inf)
        where = np.zeros(approx.shape, dtype=bool)
        where[np.unravel_index(int(np.argmax(gain)), gain.shape)] = True
        replay_cells(problem.costs, problem.prompts, queues, draws, values, where, reserve)
        approx &= ~where
        slowest = max(slowest, clock.now() - played)
    return least_mean([values.max(axis=1, initial=0.0), *theirs])


def work_floors(
    problem: Problem, queues: Sequence[Sequence[int]], draws: npt.NDArray[np.int64], workers: Sequence[int]
) -> FloatArray:
    """(draws x workers): for each of ``workers``, the time its queue's drawn load needs at least
    (``load``'s estimate with its cache full, not ``KV_FILL`` full: a lower bound of the worker
    model), 0 elsewhere: where a queue runs in waves its work, not its longest item, sets its finish
    (short-cot step 3: an H100's 434 items played 14-21 s, its longest alone 9-13 s, this 12-16 s)."""
    out = np.zeros((len(draws), len(queues)))
    for w in workers:
        queue = np.asarray(queues[w], dtype=np.int64)
        if not len(queue):
            continue
        cost, r = problem.costs[w], rates(problem.costs[w])
        steps = draws[:, queue].astype(np.float64)
        held = np.asarray(problem.prompts, dtype=np.float64)[queue][None, :]
        kv = (held * steps + steps * (steps - 1) / 2).sum(axis=1)
        tokens = steps.sum(axis=1)
        n = np.maximum.reduce([steps.max(axis=1), kv / cost.kv_capacity_tokens, tokens / cost.max_num_seqs])
        busy = np.maximum(n * r.step_s + r.kv_s * kv, n * r.overhead_s + r.seq_s * tokens + r.token_s * kv)
        out[:, w] = busy + r.prefill_s * float(held.sum())
    return out


def _blinds_played(
    problem: Problem,
    blinds: Sequence[Sequence[Sequence[int]]],
    head: Sequence[FloatArray],
    draws: npt.NDArray[np.int64],
    reserve: bool,
    deadline: float,
    pace: float,
) -> tuple[list[FloatArray], float] | None:
    """Each of ``blinds`` played on every draw (``head``: on the first), ``CHUNK`` draws at a time,
    each chunk started only where it ends by ``deadline`` at the slowest pace seen (``pace``: one
    draw of one plan); with that pace, or None where a chunk would not fit.

    Why. The rest of the draws were played in one pass, priced at the first draw's pace: at 1,024 x
    16 on a loaded host (cpsat at 250 ms) one draw took ~0.5 ms and the 31 others 26 and 77 ms,
    and with the plan's estimates (44 ms, not priced at all) the bar ended 109 ms past its budget
    (hedge49)."""
    theirs: list[FloatArray] = []
    for first, blind in zip(head, blinds, strict=True):
        values = [first]
        for start in range(1, len(draws), CHUNK):
            chunk = draws[start : start + CHUNK]
            started = clock.now()
            if started + len(chunk) * pace > deadline:
                return None
            values.append(makespans(problem, blind, chunk, reserve))
            pace = max(pace, (clock.now() - started) / len(chunk))
        theirs.append(np.concatenate(values))
    return theirs, pace

"""Every worker's finish on many draws of the lengths in one vectorised pass, where its queue runs at once.

Why. Comparing plans on draws of the lengths (``scheduler.policies.robust_fast``) plays every queue
of a candidate on every draw and on a copy of it with one trajectory run long. Played one draw at a
time (``scheduler.finish.queue_finishes``, vectorised over the items of one play) that was 32 calls
whose set-up cost about what playing 400 trajectories does: ~27 ms for two candidates at the math100
trace's 400 samples, and the budget gate, timing one play and multiplying by 128, projected ~66 ms,
so the service's 80 ms plan never saw the comparison. When a queue runs at once its finish is a closed
form (``all_at_once_finish``), and the closed form vectorises across draws as well as items.

How. The draws are a (draws x workers x longest queue) block, padded with empty trajectories (no
prompt, no steps: they sort last and add nothing); each draw's lengths are sorted per worker along
the last axis, longest first (stable, as ``queue_finishes`` sorts), and every completion's decode
time comes from one ``decode_times`` call per step-cost group. The clock is accumulated along the
same axis in time order (``np.add.accumulate`` is sequential), so each finish is the same sum in the
same order as ``all_at_once_finish``: equal to it, and to the event loop, to the last bit. The
stretched copy changes only the longest trajectory (sorted first, completing last), so its finish
is the clock before that last completion plus one more decode time: no second pass. A queue that
does not run at once on some draw (too many, a prompt too large, a step past the cache) is played
by the event loop (``worker_finish``) on that draw, as ``queue_finishes`` would.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from scheduler.at_once import may_run_at_once, same_coefficients
from scheduler.costmodel import WorkerCost
from scheduler.finish import worker_finish
from scheduler.stepsum import FloatArray, decode_times, solo_decode_times

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def drawn_finishes(
    costs: Sequence[WorkerCost],
    prompts: Sequence[int],
    queues: Sequence[Sequence[int]],
    draws: IntArray,
    stretch: IntArray,
    reserve: bool,
) -> tuple[FloatArray, FloatArray]:
    """Each worker's finish on each draw (``draws[d]``: every item's steps), and on the draw with the
    worker's longest item, the first in queue order among equals, run to ``stretch`` of that item
    where that is longer: two (draws x workers) arrays of ``queue_finishes``'s values (0 for an
    empty queue)."""
    drawn, stretched = _finishes(costs, prompts, queues, draws, stretch, reserve)
    assert stretched is not None  # given a stretch, the stretched copy is played
    return drawn, stretched


def draw_finishes(
    costs: Sequence[WorkerCost],
    prompts: Sequence[int],
    queues: Sequence[Sequence[int]],
    draws: IntArray,
    reserve: bool,
) -> FloatArray:
    """``drawn_finishes`` without the stretched copy, for comparisons on the draws alone
    (``scheduler.policies.robust.least_expected``): no column and no event-loop replays spent on
    a copy nobody reads."""
    return _finishes(costs, prompts, queues, draws, None, reserve)[0]


def estimated_finishes(
    costs: Sequence[WorkerCost],
    prompts: Sequence[int],
    queues: Sequence[Sequence[int]],
    draws: IntArray,
    reserve: bool,
    planned: Sequence[int],
    points: Sequence[float],
    scaled: list[int] | None = None,
) -> tuple[FloatArray, BoolArray]:
    """``draw_finishes`` without the event loop, and where each value is not that play's: a queue
    that runs at once on the planned lengths but not on a draw keeps its closed form on that draw,
    and a queue that never runs at once gets its point finish (``points``, on the ``planned`` steps)
    scaled by its drawn over planned KV-token-steps (appended to ``scaled`` when given). The second
    array marks those estimates, which ``replay_cells`` can make exact where they matter
    (``scheduler.policies.robust.judged``).

    Why. A band plan packs its middle queues up to their caches, so on draws a few run past them,
    and its lowest bands run in waves: through the event loop, 4 draws of a 4,096 x 32 band plan
    under KV admission took ~570 ms, the closed forms ~10 ms. On the bench batches (seeds 0-1,
    p90/p50 1.2 and 1.6) the closed form was 0.99-1.08 of the play where a queue ran past its cache,
    the scaled point finish 0.95-1.03 of it for queues in waves, and each draw's makespan within
    0.2%. Not everywhere: on the real math100 trace one long drawn item set a queue's finish,
    1.22-2.81x its estimate, so the judge trusts an estimate only once checked (``longest_alone``
    and one play a queue)."""
    drawn, approx = closed_forms(costs, prompts, queues, draws, reserve)
    held = np.asarray(prompts, dtype=np.float64)
    steps = np.asarray(planned, dtype=np.float64)
    for w in np.nonzero(approx.all(axis=0))[0].tolist():
        queue = np.asarray(queues[w], dtype=np.int64)
        if not len(queue) or drawn[:, w].any():
            continue  # empty, or a closed form on every draw: not a queue in waves
        work = float((steps[queue] * (held[queue] + steps[queue] / 2)).sum())
        taken = draws[:, queue].astype(np.float64)
        drawn_work = (taken * (held[queue][None, :] + taken / 2)).sum(axis=1)
        drawn[:, w] = points[w] * drawn_work / work if work > 0 else points[w]
        if scaled is not None:
            scaled.append(w)
    return drawn, approx


def closed_forms(
    costs: Sequence[WorkerCost],
    prompts: Sequence[int],
    queues: Sequence[Sequence[int]],
    draws: IntArray,
    reserve: bool,
) -> tuple[FloatArray, BoolArray]:
    """Each queue's closed form on each draw, without the event loop; the second array marks every
    cell that is not that draw's play: a draw with a step past the cache (the closed form is kept
    there), or a queue that may never run at once (left at 0).

    For a caller whose event loop is not ``worker_finish``'s and who plays the marked cells itself:
    ``scheduler.policies.robust_place`` admits on the planned lengths and ends by the draw, which
    only a queue admitted whole at step 0 shares with these values."""
    approx = np.zeros((len(draws), len(queues)), dtype=bool)
    drawn = _finishes(costs, prompts, queues, draws, None, reserve, approx)[0]
    return drawn, approx


def longest_alone(
    costs: Sequence[WorkerCost],
    prompts: Sequence[int],
    queues: Sequence[Sequence[int]],
    draws: IntArray,
    workers: Sequence[int],
) -> FloatArray:
    """(draws x workers): for each of ``workers``, the longest decode of one of its drawn items
    alone on it (0 elsewhere): a lower bound of the queue's play on that draw, since every item
    decodes each of its steps at least as slowly as alone at its own context.

    Why. ``estimated_finishes`` scales a queue in waves by its drawn KV work, but such a queue's
    finish may be set by one long drawn item, not by its total: on the real math100 trace
    (4 x H100) the 396-item queue of cpsat's band plan played 1.22-2.81x its estimates, and this
    bound was up to 2.5x them, which shows those estimates wrong without playing them."""
    out = np.zeros((len(draws), len(queues)))
    held = np.asarray(prompts, dtype=np.float64)
    for w in workers:
        queue = np.asarray(queues[w], dtype=np.int64)
        if not len(queue):
            continue
        taken = draws[:, queue].astype(np.float64)
        alone = solo_decode_times(costs[w], np.broadcast_to(held[queue], taken.shape).ravel(), taken.ravel())
        out[:, w] = alone.reshape(taken.shape).max(axis=1)
    return out


def replay_cells(
    costs: Sequence[WorkerCost],
    prompts: Sequence[int],
    queues: Sequence[Sequence[int]],
    draws: IntArray,
    out: FloatArray,
    where: BoolArray,
    reserve: bool,
) -> None:
    """``out[d, w]`` played by the event loop wherever ``where`` is set: ``estimated_finishes``'s
    estimates made exact, each the value ``draw_finishes`` gives that cell to the last bit."""
    _replay(costs, prompts, queues, draws, out, where, reserve, None)


def _finishes(
    costs: Sequence[WorkerCost],
    prompts: Sequence[int],
    queues: Sequence[Sequence[int]],
    draws: IntArray,
    stretch: IntArray | None,
    reserve: bool,
    approx: BoolArray | None = None,
) -> tuple[FloatArray, FloatArray | None]:
    """``drawn_finishes``, the stretched copy only when ``stretch`` is given; with ``approx``, the
    event loop is not run: the cells it would play are marked there instead (a queue that runs at
    once on the planned lengths keeps its closed form, one that never does is left at 0). A queue
    that can never run at once (more items than slots, prompts past the cache) is played by the event loop on
    every draw and kept out of the block, which is as wide as the longest queue in it: a crowded
    queue of a searched plan (~440 of 1,024 items on one worker) would otherwise pad every other
    worker's row to its length on every draw."""
    drawn = np.zeros((len(draws), len(queues)))
    stretched = None if stretch is None else np.zeros((len(draws), len(queues)))
    held = np.asarray(prompts, dtype=np.int64)
    totals = [int(held[list(queue)].sum()) for queue in queues]  # each queue's prompt tokens
    busy = [w for w, queue in enumerate(queues) if queue]
    block = [w for w in busy if may_run_at_once(costs[w], totals[w], len(queues[w]), reserve)]
    looped = sorted(set(busy) - set(block))  # played by the event loop on every draw
    crowded = np.zeros(drawn.shape, dtype=bool)
    crowded[:, looped] = True
    if approx is not None:
        approx |= crowded
    else:
        _replay(costs, prompts, queues, draws, drawn, crowded, reserve, None)
    if stretched is not None and stretch is not None:
        longest = _stretched_longest(queues, draws, stretch, looped)
        _replay(costs, prompts, queues, draws, stretched, crowded, reserve, longest)
    if block:
        at = np.array(block)
        marked = None if approx is None else np.zeros((len(draws), len(block)), dtype=bool)
        block_drawn, block_stretched = _busy_finishes(
            [costs[w] for w in block],
            prompts,
            [queues[w] for w in block],
            [totals[w] for w in block],
            draws,
            stretch,
            reserve,
            marked,
        )
        if approx is not None:
            approx[:, at] = marked
        drawn[:, at] = block_drawn
        if stretched is not None and block_stretched is not None:
            stretched[:, at] = block_stretched
    return drawn, stretched


def _stretched_longest(
    queues: Sequence[Sequence[int]], draws: IntArray, stretch: IntArray, chosen: Sequence[int]
) -> FloatArray:
    """(draws x workers): for each worker in ``chosen``, its longest drawn item (the first in queue
    order among equals) run to that item's ``stretch`` where that is longer (``_replay``'s
    ``longest``); 0 elsewhere."""
    longest = np.zeros((len(draws), len(queues)))
    for w in chosen:
        queue = np.asarray(queues[w])
        steps = draws[:, queue]
        first = queue[np.argmax(steps, axis=1)]  # argmax: the first of equals
        longest[:, w] = np.maximum(steps.max(axis=1), stretch[first])
    return longest


def _busy_finishes(
    costs: Sequence[WorkerCost],
    prompts: Sequence[int],
    queues: Sequence[Sequence[int]],
    totals: Sequence[int],
    draws: IntArray,
    stretch: IntArray | None,
    reserve: bool,
    marked: BoolArray | None = None,
) -> tuple[FloatArray, FloatArray | None]:
    """``_finishes`` of queues none of which is empty and each of which may run at once
    (``may_run_at_once``; ``totals``: their prompt tokens); with ``marked``, the draws on which a
    queue does not run at once are set there and keep their closed form (no stretched copy)."""
    s, items, held = _sorted(prompts, queues, draws)
    count, workers, size = s.shape
    running = np.broadcast_to(np.arange(1.0, size + 1.0), s.shape)
    start = np.concatenate((s[:, :, 1:], np.zeros((count, workers, 1))), axis=2)  # the next completion
    context = held + running * start
    longest = None if stretch is None else np.maximum(s[:, :, 0], np.append(stretch, 0)[items[:, :, 0]])
    if longest is None:
        decode = _decode(costs, running, context, s - start)
    else:  # one column more: the longest's last run on the stretched copy
        decode = _decode(
            costs,
            np.concatenate((running, np.ones((count, workers, 1))), axis=2),
            np.concatenate((context, context[:, :, :1]), axis=2),
            np.concatenate((s - start, (longest - start[:, :, 0])[:, :, None]), axis=2),
        )
    prefill = [c.prefill_time(total) for c, total in zip(costs, totals, strict=True)]
    first = np.broadcast_to(np.array(prefill)[None, :, None], (count, workers, 1))
    # completions in time order, the shortest first: the event loop's summation order
    clocks = np.add.accumulate(np.concatenate((first, decode[:, :, size - 1 :: -1]), axis=2), axis=2)
    drawn = clocks[:, :, -1]
    caps = np.array([c.kv_capacity_tokens for c in costs], dtype=np.float64)[None, :]
    sizes = np.array([len(q) for q in queues])
    over = (held + running * s > caps[:, :, None]) & (running <= sizes[None, :, None])
    rest = over[:, :, 1:].any(axis=2)  # some step past the cache, the longest's last aside
    if marked is not None:
        marked |= rest | over[:, :, 0]
        return drawn, None
    _replay(costs, prompts, queues, draws, drawn, rest | over[:, :, 0], reserve, None)
    if longest is None:
        return drawn, None
    stretched = clocks[:, :, -2] + decode[:, :, size]
    stretched_over = rest | (held[:, :, 0] + longest > caps)
    _replay(costs, prompts, queues, draws, stretched, stretched_over, reserve, longest)
    return drawn, stretched


def _sorted(
    prompts: Sequence[int], queues: Sequence[Sequence[int]], draws: IntArray
) -> tuple[FloatArray, IntArray, FloatArray]:
    """Each draw's steps per worker, longest first (stable: queue order among equals, as
    ``queue_finishes`` sorts), padded with empty items to the longest queue; the item at each place
    (``len(prompts)`` for padding); the prompt tokens held up to each place."""
    count, workers, size = len(draws), len(queues), max(len(q) for q in queues)
    pad = len(prompts)  # an empty item: no prompt, no steps, sorted last
    index = np.full((workers, size), pad, dtype=np.int64)
    for w, queue in enumerate(queues):
        index[w, : len(queue)] = queue
    steps = np.concatenate((draws, np.zeros((count, 1), dtype=np.int64)), axis=1)[:, index]
    order = np.argsort(-steps, axis=2, kind="stable")
    items = np.take_along_axis(np.broadcast_to(index, steps.shape), order, axis=2)
    held = np.cumsum(np.append(np.asarray(prompts, dtype=np.float64), 0.0)[items], axis=2)  # exact: integers
    return np.take_along_axis(steps, order, axis=2).astype(np.float64), items, held


def _decode(
    costs: Sequence[WorkerCost], running: FloatArray, context: FloatArray, steps: FloatArray
) -> FloatArray:
    """``decode_times`` of a (draws x workers x ...) block, each worker on its own cost, computed
    only where steps run (equal lengths complete together, as one run in the closed form, and the
    padding runs nothing): zero elsewhere."""
    out = np.zeros(steps.shape)
    runs = steps > 0
    for cost, members in same_coefficients(costs).items():
        group = np.zeros(len(costs), dtype=bool)
        group[members] = True
        where = runs & group[None, :, None]
        out[where] = decode_times(cost, running[where], context[where], steps[where])
    return out


def _replay(
    costs: Sequence[WorkerCost],
    prompts: Sequence[int],
    queues: Sequence[Sequence[int]],
    draws: IntArray,
    out: FloatArray,
    where: npt.NDArray[np.bool_],
    reserve: bool,
    longest: FloatArray | None,
) -> None:
    """``out[d, w]`` played by the event loop wherever ``where`` says the queue does not run at once
    (on the draw with its longest item, the first of equals, run to ``longest[d, w]``, when given)."""
    for d, w in zip(*np.nonzero(where), strict=True):
        queue = queues[w]
        steps = [int(draws[d, i]) for i in queue]
        if longest is not None:
            first = max(range(len(queue)), key=lambda j: steps[j])
            steps[first] = int(longest[d, w])
        out[d, w] = worker_finish(costs[w], [prompts[i] for i in queue], steps, reserve)

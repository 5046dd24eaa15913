"""A queue admitted whole at step 0 and never preempted, in closed form: the worker model's common case.

A worker whose queue fits its slots and its KV cache starts every item at once (``scheduler.finish``
describes the worker model), and its run is then a sequence of completions with a shrinking batch:
a vectorised sum instead of an event loop. Planning asks this of many candidate orders, and steal
deadlines (``scheduler.deadlines``) and the planner's hedges of many queues at once, so each form
here has a one-queue and a many-queue version. Every form keeps the event loop's arithmetic element
by element (integer sums are exact in float64) and its summation order, so each result equals
``finish.worker_finish``'s clock to the last bit; the tests compare them bit for bit.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from scheduler import giveup
from scheduler.admission import WATERMARK
from scheduler.costmodel import WorkerCost
from scheduler.stepsum import decode_times

GIVE_UP_ITEMS = 4096  # items of the queues ``all_at_once_finishes`` plays between deadline checks


def all_at_once_finish(
    cost: WorkerCost, prompts: Sequence[int], steps: Sequence[int], reserve: bool = False
) -> float | None:
    """``worker_finish`` in closed form when the whole queue is admitted at once and never preempted;
    None otherwise (then the order matters and the event loop must play it).

    That case is common (a worker whose queue fits its slots and KV cache) and then the run is a
    sequence of completions with a shrinking batch: one vectorised sum instead of an event loop.
    """
    if not prompts:
        return 0.0
    run = _at_once(cost, prompts, steps, reserve)
    return None if run is None else run[1][-1]


def all_at_once_ends(
    cost: WorkerCost, prompts: Sequence[int], steps: Sequence[int], reserve: bool = False
) -> list[float] | None:
    """Each item's completion time, in input order, in ``all_at_once_finish``'s case (every item
    starts at 0); None otherwise. The same clock the event loop reads at each completion, to the
    last bit, without playing it: what the steal deadlines (``scheduler.deadlines``) need."""
    if not prompts:
        return []
    run = _at_once(cost, prompts, steps, reserve)
    if run is None:
        return None
    ends, clocks = run
    segment = np.searchsorted(ends, np.asarray(steps, dtype=np.float64))  # each item's completion
    return [clocks[j] for j in segment.tolist()]


def _at_once(
    cost: WorkerCost, prompts: Sequence[int], steps: Sequence[int], reserve: bool
) -> tuple[npt.NDArray[np.float64], list[float]] | None:
    """The distinct completion steps, ascending, and the clock at each, when the queue runs at once."""
    if len(prompts) > cost.max_num_seqs:  # before the arrays: most candidate queues end here
        return None
    p = np.asarray(prompts, dtype=np.float64)
    s = np.asarray(steps, dtype=np.float64)
    if not may_run_at_once(cost, float(p.sum()), len(prompts), reserve):
        return None
    order = np.argsort(-s, kind="stable")
    p, s = p[order], s[order]
    last = np.flatnonzero(np.append(s[1:] != s[:-1], True))  # last index of each distinct length
    ends = s[last][::-1]  # completion steps, ascending
    running = (last + 1)[::-1].astype(np.float64)  # sequences running up to each completion
    held = np.cumsum(p)[last][::-1]  # their prompt tokens
    if np.any(held + running * ends > cost.kv_capacity_tokens):
        return None  # some step would not fit: the newest is preempted, order matters
    starts = np.concatenate(([0.0], ends[:-1]))
    decode = decode_times(cost, running, held + running * starts, ends - starts)
    clock = cost.prefill_time(int(p.sum()))
    clocks = []
    for spent in decode.tolist():  # the event loop's summation order, so both agree to the last bit
        clock += spent
        clocks.append(clock)
    return ends, clocks


def all_at_once_finishes(
    costs: Sequence[WorkerCost],
    prompts: npt.NDArray[np.int64],
    steps: npt.NDArray[np.int64],
    bounds: Sequence[int],
    reserve: bool = False,
) -> list[float | None]:
    """``all_at_once_finish`` of many queues in one vectorised pass (256 workers then cost about
    what a few cost one by one): queue ``k`` is ``[bounds[k], bounds[k + 1])`` of ``prompts`` and
    ``steps``, already in non-increasing ``steps`` order, played on ``costs[k]``.

    Each result equals ``all_at_once_finish`` to the last bit (``play_at_once``).

    The queues are played ``GIVE_UP_ITEMS`` items at a time (whole queues), the caller's hard deadline
    checked between (``scheduler.giveup``): one pass over 16,384 items on 128 workers was the lpt
    start's longest stretch without a check, ~7 ms of CPU (docs/experiments.md, deadline49). Each
    queue's arithmetic is its own (integer sums are exact), so the blocks give every bit one pass gives.
    """
    finishes: list[float | None] = []
    for first, last in _blocks(bounds):
        if first:
            giveup.check()
        low, high = bounds[first], bounds[last]
        part = [edge - low for edge in bounds[first : last + 1]]
        floats = prompts[low:high].astype(np.float64), steps[low:high].astype(np.float64)
        block = play_at_once(costs[first:last], *floats, part, reserve)
        runs = block.runs
        finishes.extend(
            (block.clocks[runs[k]] if block.fits[k] else None) if runs[k] < runs[k + 1] else 0.0
            for k in range(last - first)
        )
    return finishes


def _blocks(bounds: Sequence[int]) -> Iterator[tuple[int, int]]:
    """Runs ``[first, last)`` of whole queues (by index) of ``GIVE_UP_ITEMS`` items or more each, the
    last one what is left; one run of every queue where they hold fewer items than that."""
    first = 0
    for last in range(1, len(bounds)):
        if bounds[last] - bounds[first] >= GIVE_UP_ITEMS or last == len(bounds) - 1:
            yield first, last
            first = last


def longest_first_layout(
    queue: npt.NDArray[np.int64], steps: npt.NDArray[np.int64], ties: npt.NDArray[np.int64], ties_below: int
) -> npt.NDArray[np.intp]:
    """The permutation that lays items out queue by queue, each queue longest first, equal lengths
    by increasing ``ties`` (distinct, in ``[0, ties_below)``): ``np.lexsort((ties, -steps,
    queue))``, as ``play_at_once`` takes a layout.

    Why. Every band round lays out its queues so (``ordering.order_queues``), and the three-key
    lexsort was most of that: 0.46 ms of 1.4 at 4,096 x 32, 2.4 of 6.4 at 16,384 x 128. One stable
    argsort of a key made of the three costs 0.02 / 0.05 ms (the input comes queue by queue, in
    runs the sort merges). The keys are distinct, so the permutation is the lexsort's; where the
    key could overflow int64, the lexsort runs.
    """
    if len(steps) == 0:
        return np.zeros(0, dtype=np.intp)
    longest = int(steps.max())
    span = longest - int(steps.min()) + 1  # ``longest - steps`` lies in [0, span)
    if (int(queue.max()) + 1) * span * ties_below >= 2**63:
        return np.lexsort((ties, -steps, queue))
    return np.argsort((queue * span + (longest - steps)) * ties_below + ties, kind="stable")


class AtOnceBlock(NamedTuple):
    """Queues laid end to end, each longest first, played at once in closed form. A run is the
    items of one queue with one length: they complete together, at one clock."""

    at: npt.NDArray[np.intp]  # each run's last item's place in the layout
    runs: list[int]  # queue ``k``'s runs are ``[runs[k], runs[k + 1])``, longest first
    clocks: list[float]  # each run's completion clock; 0.0 in a queue that does not run at once
    fits: list[bool]  # each queue runs at once: ``may_run_at_once`` and no step overflows the cache


def play_at_once(
    costs: Sequence[WorkerCost],
    prompts: npt.NDArray[np.float64],
    steps: npt.NDArray[np.float64],
    bounds: Sequence[int],
    reserve: bool,
) -> AtOnceBlock:
    """The closed form of ``_at_once`` for every queue of a layout (``all_at_once_finishes``'s) in
    one pass: element by element the same arithmetic (integer sums are exact in float64) and per
    queue the same summation order, so every clock equals the event loop's to the last bit."""
    edges = np.asarray(bounds, dtype=np.int64)
    count, size = len(edges) - 1, int(edges[-1])
    segment = np.repeat(np.arange(count), np.diff(edges))
    total = np.concatenate(([0.0], np.cumsum(prompts)))
    held = total[1:] - total[edges[:-1]][segment]  # prompts of the queue's sequences up to here
    running = (np.arange(size) - edges[:-1][segment] + 1).astype(np.float64)
    last = np.ones(size, dtype=bool)  # the last of each run of equal lengths within a queue
    last[:-1] = (steps[1:] != steps[:-1]) | (segment[1:] != segment[:-1])
    at = np.flatnonzero(last)
    queue, end, run, kept = segment[at], steps[at], running[at], held[at]
    follows = np.append(queue[1:] == queue[:-1], False)  # a shorter run follows in the same queue
    start = np.where(follows, np.append(end[1:], 0.0), 0.0)
    caps = np.array([c.kv_capacity_tokens for c in costs], dtype=np.float64)
    over = (np.bincount(queue[kept + run * end > caps[queue]], minlength=count) > 0).tolist()
    decode = np.zeros(len(at))
    scales = np.array([c.time_scale for c in costs], dtype=np.float64)
    for cost, members in _same_shape(costs).items():  # one pass a device, whatever its workers' speeds
        mask = np.isin(queue, members)
        unscaled = decode_times(cost, run[mask], (kept + run * start)[mask], (end - start)[mask])
        decode[mask] = scales[queue[mask]] * unscaled  # decode_times' last operation, per worker
    sums, sizes = (total[edges[1:]] - total[edges[:-1]]).tolist(), np.diff(edges).tolist()
    fits = [may_run_at_once(c, sums[k], sizes[k], reserve) and not over[k] for k, c in enumerate(costs)]
    runs = np.searchsorted(queue, np.arange(count + 1)).tolist()
    return AtOnceBlock(at, runs, _run_clocks(costs, sums, runs, fits, decode.tolist()), fits)


def _run_clocks(
    costs: Sequence[WorkerCost], sums: list[float], runs: list[int], fits: list[bool], decode: list[float]
) -> list[float]:
    """Each run's completion clock: the prefill of every prompt, then the decode times of the runs
    in time order (shortest first), the event loop's summation order."""
    clocks = [0.0] * len(decode)
    for k, cost in enumerate(costs):
        if not fits[k] or runs[k] == runs[k + 1]:
            continue
        clock = cost.prefill_time(int(sums[k]))
        for j in range(runs[k + 1] - 1, runs[k] - 1, -1):
            clock += decode[j]
            clocks[j] = clock
    return clocks


def may_run_at_once(cost: WorkerCost, prompt_total: float, n: int, reserve: bool) -> bool:
    """The tests of running ``n`` items at once that do not depend on their lengths: a slot for
    every item, and every prompt (``prompt_total`` tokens, an integer) admitted at step 0 (under
    ``reserve``, with the one token each will hold after it)."""
    cap = cost.kv_capacity_tokens
    crowded = prompt_total + n > cap if reserve else prompt_total > cap - WATERMARK * cap
    return n <= cost.max_num_seqs and not (n > 1 and crowded)


def _same_shape(costs: Sequence[WorkerCost]) -> dict[WorkerCost, list[int]]:
    """Queue indices grouped by step-time coefficients but for the time scale, each group under its
    first cost at scale 1: ``decode_times`` multiplies by the scale last, so ``scale * (1.0 * x)``
    is its result to the last bit, and learned speeds (one scale a worker) cost one pass a device
    instead of one a worker."""
    first: dict[tuple[float, ...], WorkerCost] = {}
    groups: dict[WorkerCost, list[int]] = {}
    for k, c in enumerate(costs):
        key = c.step_signature()[:-1]
        if key not in first:
            first[key] = dataclasses.replace(c, time_scale=1.0)
        groups.setdefault(first[key], []).append(k)
    return groups


def same_coefficients(costs: Sequence[WorkerCost]) -> dict[WorkerCost, list[int]]:
    """Queue indices grouped by step-time coefficients, each group under its first cost."""
    first: dict[tuple[float, ...], WorkerCost] = {}
    groups: dict[WorkerCost, list[int]] = {}
    for k, c in enumerate(costs):
        groups.setdefault(first.setdefault(c.step_signature(), c), []).append(k)
    return groups


def ends_at_once(
    queues: Sequence[tuple[WorkerCost, Sequence[int], Sequence[int]]], reserve: bool
) -> list[list[float] | None]:
    """``all_at_once_ends`` of many queues ((cost, prompts, steps) each) in one pass: each
    item's completion in input order, or None for a queue that does not run at once.

    The queues are laid out as ``play_at_once`` takes them, so every end equals the one-queue
    form's to the last bit (``tests/scheduler/test_deadlines_batch.py``).
    """
    sizes = [len(p) for _, p, _ in queues]
    if not queues or sum(sizes) == 0:
        return [[] for _ in queues]
    edges = [0, *itertools.accumulate(sizes)]
    worker = np.repeat(np.arange(len(queues)), sizes)
    steps = np.concatenate([np.asarray(s, dtype=np.float64) for _, _, s in queues])
    prompts = np.concatenate([np.asarray(p, dtype=np.float64) for _, p, _ in queues])
    order = np.lexsort((np.arange(len(steps)), -steps, worker))  # longest first, stable per queue
    block = play_at_once([c for c, _, _ in queues], prompts[order], steps[order], edges, reserve)
    ends = np.empty(len(steps))
    ends[order] = np.asarray(block.clocks)[np.searchsorted(block.at, np.arange(len(steps)))]  # its run's
    flat = ends.tolist()
    return [flat[edges[k] : edges[k + 1]] if block.fits[k] else None for k in range(len(queues))]

"""KV admission by projected peak: admit a trajectory only if the cache never overflows on the plan.

Why not reserve each sequence's final length. Reserving ``prompt + predicted output`` for every
running sequence at once counts each at its largest size for its whole life, but a sequence's KV
grows one token per step from its prompt: on long chain-of-thought batches the sum of final sizes
is about twice what the cache ever holds, so reservation keeps the cache half empty. What must hold
instead is that the KV of the running set, each sequence growing until its predicted end, never
exceeds the cache at any future step. That is a peak over a handful of points, not a sum:

    held(t) = sum over running i with remaining_i > t of (context_i + t + 1)

is what the batch holds after its decode step ``t`` (``t = 0`` is the next step; a step writes one
token per sequence, which is the engine's preemption test ``context + batch <= capacity``). Between
completions ``held`` only grows, so its maximum is at ``t = remaining_i - 1`` for some ``i``.

On exact lengths an engine that admits by this test never preempts, and it keeps the cache as full
as that allows. On predicted lengths a sequence that outlives its prediction is expected to run a
further quarter of it (``expected_remaining``), again each time it outlives that; the engine's
preemption remains the safety net.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from itertools import accumulate
from operator import add, itemgetter, mul

WATERMARK = 0.01  # share of the KV cache kept free at admission (vLLM V0's default; V1 keeps none
# by default: docs/simulator.md, "Fidelity to vLLM V1 and SGLang")
PIECES = 16  # most pieces ``RunningPeak.covered`` tries before the exact pass decides (an lpt
# step of the headline replay, CPU: 4 pieces 7.7 s, 8 7.1 s, 16 6.7 s, 32 6.7 s, 64 6.8 s)
OVERRUN_SHARE = 0.25  # a sequence past its prediction is expected to run this share of it again
# (headline replay, cpsat with stealing, makespan over the bound, trace seeds 1 / 2: counted as
# ending at its next step 1.262x / 1.283x; a tenth 1.257x / 1.275x; a quarter 1.253x / 1.271x;
# a half 1.254x / 1.291x; docs/experiments.md, Replay, "Projected-peak admission: prediction
# error")


def expected_remaining(planned: int, generated: int) -> int:
    """Decode steps a running sequence is still expected to take, for admission (at least one).

    Before its predicted length, the rest of it. Past it, the sequence has shown that the prediction
    was short, so it is expected to run another ``OVERRUN_SHARE`` of it, in whole extensions:
    counting it as ending at its next step instead keeps admitting beside it until the cache
    overflows and the newest sequence, often a long one started late, loses its progress.
    A pure function of the sequence's progress, so the simulator and a sidecar agree on it.
    """
    left = planned - generated
    if left > 0:
        return left
    extension = max(1, math.ceil(planned * OVERRUN_SHARE))
    return extension - (-left) % extension


def projected_peak(contexts: Sequence[int], remaining: Sequence[int]) -> int:
    """The most KV tokens the running sequences will hold at once if each runs ``remaining`` more steps.

    ``contexts[i]``: tokens sequence ``i`` holds now (prompt plus output so far); ``remaining[i]``:
    decode steps it still runs (values below 1 count as 1: it is running, so it takes a step).
    Plain Python: a sidecar tests it once per item it starts, about 0.1 ms at 256 sequences (numpy:
    0.05 ms; faster below ~30), which does not pay for loading numpy (~0.2 s) when the sidecar starts.
    """
    pairs = sorted(zip((max(r, 1) for r in remaining), contexts, strict=True), key=itemgetter(0))
    peak = held = 0
    for running, (steps, context) in enumerate(reversed(pairs), start=1):  # from the latest end down
        held += context  # contexts of the sequences still running at ``steps - 1``
        peak = max(peak, held + running * steps)
    return peak


def peak_fits(
    contexts: Sequence[int], remaining: Sequence[int], prompt: int, steps: int, capacity: int
) -> bool:
    """Whether a new sequence of ``prompt`` tokens running ``steps`` steps keeps the projected peak
    within ``capacity``, beside the running ones (see ``projected_peak``)."""
    return projected_peak([*contexts, prompt], [*remaining, steps]) <= capacity


class RunningPeak:
    """A worker's running set for ``peak_fits`` tests at every event, in plain Python and O(n).

    The event loops test admission after every completion with up to ``max_num_seqs`` sequences
    running; a numpy call per test costs more than the test. Between admissions a running
    sequence's predicted end is a fixed absolute step ``end`` and its context at step ``u`` is
    ``offset + u`` (``offset``: context at admission less the admission step), so the set is kept
    as (end, offset) pairs sorted by end, and a test is one pass from the latest end down, over
    the ends that a few bisections (``covered``) leave undecided: most tests admit, and those
    nearly always end there.

    ``alone_fits``: the caller's promise that the running set alone never passes the cache at any
    step, so ``overflow`` need not check the steps past the candidate's end, where only the set
    counts. It holds on exact lengths where every member was admitted by this test (or fits the
    cache on its own): held at a later step counts only members that run until then, each at its
    fixed context, a subset of what the last of them was tested with (``scheduler.finish``, where
    that check was ~16% of a KV-admission cpsat plan at 4,096 x 32). Off by default: on predicted
    lengths (the simulator) a member that outlives its end breaks it.
    """

    __slots__ = ("alone_fits", "changes", "end_sum", "ends", "offsets", "total")

    def __init__(self, alone_fits: bool = False) -> None:
        self.ends: list[int] = []  # predicted end steps (absolute), ascending
        self.offsets: list[int] = []  # offsets, parallel to ``ends``
        self.total = 0  # sum of ``offsets``
        self.end_sum = 0  # sum of ``ends`` (``covered``)
        self.alone_fits = alone_fits  # see the class doc
        self.changes = 0  # adds and removes so far: a caller's answer holds while this is unchanged

    def add(self, end: int, offset: int) -> None:
        """A sequence predicted to run until absolute step ``end`` (at least the next one) starts."""
        at = bisect.bisect_right(self.ends, end)
        self.ends.insert(at, end)
        self.offsets.insert(at, offset)
        self.total += offset
        self.end_sum += end
        self.changes += 1

    def remove(self, end: int, offset: int) -> None:
        """The sequence ``add``-ed with ``end`` and ``offset`` stops (completed or evicted)."""
        at = bisect.bisect_left(self.ends, end)
        while self.offsets[at] != offset:
            at += 1
        del self.ends[at], self.offsets[at]
        self.total -= offset
        self.end_sum -= end
        self.changes += 1

    def fits(self, step: int, offset: int, end: int, capacity: int) -> bool:
        """``peak_fits`` at absolute step ``step`` for a candidate with ``offset`` and ``end``."""
        return self.overflow(step, offset, end, capacity) is None

    def covered(self, step: int, offset: int, end: int, capacity: int) -> int:
        """How much of ``overflow``'s test a few bisections settle: -1 where the candidate surely
        fits, else ``p``: every step up to ``ends[p - 1]`` is surely within ``capacity``.

        Why: most tests admit (about two thirds in the headline replay) and the exact test is a
        pass over the running set (~30 us at 110 running on this host); this certifies nearly all
        of those, and a refusal needs the pass only over the ends it left. How, from ends
        ``e_0 <= e_1 <= ...`` up, in pieces: no context is negative, so counting a sequence at a
        step past its end only overcounts, and at a step ``v`` in ``(e_{p-1}, e_{q-1}]`` the
        sequences ``p..n-1`` and the candidate hold at most ``S_p + (n - p + 1) * e_{q-1} + offset``
        (``S_p``: their offsets); the largest ``q`` within the cache covers a piece, the next starts
        at ``q``. Past the last end only the candidate runs (``offset + end``); every step after
        ``e_{p-1}`` is covered at once if the later sequences' final contexts (``offset_i + e_i``,
        the most each holds) plus the candidate's fit. A piece that covers nothing, or ``PIECES``
        of them, stop. Only where every end lies after ``step`` (an overdue member counts at
        ``step + 1``, past its end): else 0.

        The final contexts are kept as an upper bound, not summed: a piece's members leave it less
        their first end each (``e_p``, the least of theirs), one sum a piece instead of two. It
        certifies as the exact sum did in all but 20 of 79,691 tests of a cpsat step's plays
        (the walk then decides, so answers are unchanged), and the plays take 7% less CPU.
        """
        ends, offsets, n = self.ends, self.offsets, len(self.ends)
        room = capacity - offset  # what the running set may hold where the candidate holds ``offset + v``
        if (n and ends[0] <= step) or end > room:
            return 0
        held, finals, first = self.total, self.total + self.end_sum, 0  # S_p, (at most) its finals, p
        for _ in range(PIECES):
            if finals + end <= room:
                return -1
            last = bisect.bisect_right(ends, (room - held) // (n - first + 1), first)
            if last == n:
                return -1
            if last == first:
                break
            block = sum(offsets[first:last])
            held -= block
            finals -= block + (last - first) * ends[first]  # at most their finals: ends ascend
            first = last
        return first

    def overflow(self, step: int, offset: int, end: int, capacity: int) -> tuple[int, int] | None:
        """None where ``fits``; else ``(first, excess)``: the projection passes ``capacity`` by
        ``excess`` tokens at some absolute step at or after ``first`` (``first > step``).

        ``held`` after the step that ends at absolute step ``v`` counts every sequence with
        ``max(end, step + 1) >= v`` at context ``offset + v``: at ``v = step + 1`` all of them (a
        sequence past its predicted end is counted as ending there), above it those whose end is
        at least ``v``, the candidate while ``v <= end``. Each term is checked at the ends where
        it peaks; the sums run in C (``accumulate``, ``map``), as the test runs at every event.
        """
        covered = self.covered(step, offset, end, capacity)
        if covered < 0:
            return None
        ends, offsets, n = self.ends, self.offsets, len(self.ends)
        now = self.total + offset + (step + 1) * (n + 1)
        if now > capacity:
            return step + 1, now - capacity
        hi = bisect.bisect_right(ends, end)
        above = 0  # offsets of the sequences ending after the candidate
        if hi < n and self.alone_fits:  # promised within the cache there (class doc)
            above = sum(offsets[hi:])
        elif hi < n:  # the candidate has ended there: the running set alone (past what is covered)
            tail = max(hi, covered)
            sums = list(accumulate(reversed(offsets[tail:])))
            totals = list(map(add, sums, map(mul, reversed(ends[tail:]), range(1, n - tail + 1))))
            alone: int = max(totals, default=0)
            if alone > capacity:
                return ends[n - 1 - totals.index(alone)], alone - capacity
            above = sum(offsets[hi:])
        lo = bisect.bisect_left(ends, end, 0, hi)  # those ending with the candidate count at its end
        at_end = above + sum(offsets[lo:hi]) + offset + end * (n - lo + 1)
        if at_end > capacity:
            return end, at_end - capacity
        # ends at or before the next step are covered by the first check (no context is negative)
        low = max(bisect.bisect_right(ends, step + 1, 0, hi), covered)
        if low >= hi:
            return None
        held = list(
            map(
                add,
                accumulate(reversed(offsets[low:hi])),
                map(mul, reversed(ends[low:hi]), range(n - hi + 2, n - low + 2)),
            )
        )
        most: int = max(held)
        if most + above + offset <= capacity:
            return None
        return ends[hi - 1 - held.index(most)], most + above + offset - capacity

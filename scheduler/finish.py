"""Predicted finish time of one worker running its ordered queue: an event-driven continuous batch.

The planner reports, for every worker, when it expects that worker's last trajectory to end. That
figure must come from the same engine model the simulator plays (continuous batching, KV cache as
vLLM manages it), or the plan's makespan would be a promise nobody checks. The worker model:

- Admission, in queue order, at every event: while a slot is free (``running < max_num_seqs``) and
  the prompt fits under the KV cache less a 1% watermark (vLLM's default); with ``reserve`` (the
  plan's ``kv_admission``) only while the projected peak of the running set plus the candidate, each
  growing to its final length, fits the cache (``scheduler.admission``), so nothing is preempted;
  a refused head starts at the first step at which it fits, as the simulator plays it
  (``scheduler.head_fit``).
  Trajectories admitted together are prefilled together, once, before the next decode step.
- Decode: every running sequence appends one token per step; a step costs the cost model's
  ``step_time(b, C)`` at the current batch and context, summed in closed form between events.
- Preemption: when the next step's tokens no longer fit, the newest running sequence is evicted and
  goes back to the head of the queue, its progress lost (vLLM's recompute preemption); no admission
  happens until a decode step has run again, which guarantees progress; then it re-enters at the
  first step its prompt fits (vLLM retries its waiting line every step), an event of its own.

Events are admissions, completions, preemptions and refused heads that come to fit, so a worker
with ``n`` trajectories costs ``O(n log n)`` Python operations, independent of their lengths (plus
one O(running) test per jump of a refused head's wait, ``scheduler.head_fit``).

``_WorkerRun`` states these rules one method each; ``worker_finish`` plays them as
``scheduler.finish_loops`` writes them out on local variables (the same events and arithmetic,
so the same clock to the last bit, at a fraction of the method calls).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Sequence

import numpy as np

from scheduler.admission import WATERMARK, RunningPeak, expected_remaining
from scheduler.at_once import all_at_once_finishes, longest_first_layout
from scheduler.costmodel import WorkerCost
from scheduler.finish_loops import prompt_only_finish, reserve_finish
from scheduler.head_fit import earliest_fit, refused_until
from scheduler.stepsum import decode_time


def worker_finish(
    cost: WorkerCost,
    prompts: Sequence[int],
    steps: Sequence[int],
    reserve: bool = False,
    stop_at: float = math.inf,
) -> float:
    """Seconds until the worker described by ``cost`` finishes its queue of (prompt, steps) items.

    Items are taken in the given order; every item must fit the KV cache on its own (validated).
    The clock only grows, so once it reaches ``stop_at`` the finish cannot come sooner: the play
    stops there, or sooner where the clock plus a lower bound of the work left already passes it
    (``scheduler.finish_loops``), and returns a value of at least ``stop_at`` and at most the
    finish, which is all a caller comparing candidate orders against the best so far needs.
    """
    if reserve:
        return reserve_finish(cost, prompts, steps, stop_at)
    return prompt_only_finish(cost, prompts, steps, stop_at)


def queue_finishes(
    costs: Sequence[WorkerCost],
    prompts: Sequence[int],
    steps: Sequence[int],
    queues: Sequence[Sequence[int]],
    reserve: bool = False,
) -> list[float]:
    """``worker_finish`` of every queue (item indices into ``prompts``/``steps``) on its cost.

    Queues that run at once take the vectorised closed form, the rest the event loop: the results
    are the event loop's (the closed form follows its arithmetic and summation order).
    """
    items = np.fromiter(itertools.chain.from_iterable(queues), dtype=np.int64)
    sizes = [len(q) for q in queues]
    bounds = [0, *itertools.accumulate(sizes)]
    lengths = np.asarray(steps, dtype=np.int64)[items]
    worker = np.repeat(np.arange(len(queues)), sizes)
    order = longest_first_layout(worker, lengths, np.arange(len(items)), len(items))  # stable per queue
    at_once = all_at_once_finishes(
        costs, np.asarray(prompts, dtype=np.int64)[items][order], lengths[order], bounds, reserve
    )
    return [
        worker_finish(cost, [prompts[i] for i in queue], [steps[i] for i in queue], reserve)
        if finish is None
        else finish
        for cost, queue, finish in zip(costs, queues, at_once, strict=True)
    ]


class _WorkerRun:
    """The mutable state of one worker's event loop, one method a rule: the reference that
    ``scheduler.finish_loops`` plays on locals (tests compare them); private so the public API
    stays one function."""

    def __init__(self, cost: WorkerCost, prompts: Sequence[int], steps: Sequence[int], reserve: bool) -> None:
        self.cost, self.prompts, self.steps, self.reserve = cost, prompts, steps, reserve
        self.cap = cost.kv_capacity_tokens
        self.limit = self.cap - WATERMARK * self.cap
        self.waiting: deque[int] = deque(range(len(prompts)))
        self.heap: list[tuple[int, int, int]] = []  # (finish step, admission token, item)
        self.alive: dict[int, tuple[int, int]] = {}  # running item -> (admission token, admission step)
        self.stack: list[tuple[int, int]] = []  # (token, item) in admission order, for preemption
        self.clock, self.step, self.batch = 0.0, 0, 0
        self.offset = 0  # sum over running of (prompt - admission step): context = offset + batch*step
        # the running set's ends, for projected-peak admission under ``reserve``. Lengths are exact
        # and every member passed the test (``_fits``) or started alone, which every item fits (an
        # item that did not could never finish here), so the set alone never passes the cache
        self.peak = RunningPeak(alone_fits=True)
        self.token = 0
        self.blocked = False  # a preemption happened and no decode step has run since
        self.refused: tuple[int, int, int] | None = None  # (item, first step it may fit at, step at
        # which it was refused at the very next one or -1): _peak_fits
        self.held_bound = 0  # at least the KV the running set projects at any step ahead: _surely_fits
        self.fits_at: tuple[int, int] | None = None  # (item, step) the wait search found it fits at

    def run(self, stop_at: float = math.inf) -> float:
        """Play events until the queue is empty and nothing runs, or the clock reaches ``stop_at``;
        return the clock."""
        while True:
            if not self.blocked or self.batch == 0:
                self._admit()
            if self.batch == 0 or self.clock >= stop_at:
                return self.clock
            self._advance()

    def _fits(self, item: int) -> bool:
        if self.batch == 0:
            return True
        if self.batch >= self.cost.max_num_seqs:
            return False
        if self.reserve:
            return self._peak_fits(item)
        context = self.offset + self.batch * self.step
        return context + self.prompts[item] <= self.limit

    def _peak_fits(self, item: int) -> bool:
        """Projected-peak admission of ``item``, without the O(running) test where it must fail.

        Lengths are exact here, so every running sequence ends at its planned step: a completion
        changes nothing the projection counts after it, and a refusal bounds the wait from below
        (``head_fit.refused_until``: waiting ``d`` steps lowers the candidate's own context at any
        later step by ``d``). The bound holds until a preemption (which removes a sequence that
        had not ended) forgets it. On KV-bound queues in waves this skipped most tests (4,096
        items a worker: ~0.25 s a play).
        """
        step = self.step
        if self.refused is not None and self.refused[0] == item and step < self.refused[1]:
            return False
        remaining = expected_remaining(self.steps[item], 0)  # exact: none outlives it
        if self._surely_fits(item, remaining):
            self.refused = None
            return True
        over = self.peak.overflow(step, self.prompts[item] - step, step + remaining, self.cap)
        if over is None:
            self.refused = None
            return True
        stuck = step if over[0] == step + 1 else -1
        self.refused = (item, refused_until(self.peak, step, remaining, over), stuck)
        return False

    def _surely_fits(self, item: int, remaining: int) -> bool:
        """Whether ``item`` passes the projected-peak test without running it (``RunningPeak.overflow``,
        O(running) in Python-called C, ~25 us at ~100 running: about half of a KV-admission play).

        Two cases where the test cannot fail. The wait search (``_steps_to_fit``) just found it
        fits at this very step, and nothing has started or ended since: the same test again. Or
        the bound holds: beside a running set whose projected KV never passes ``held_bound``, a
        candidate adds at most its final size (its context only grows until its end), so the
        projection cannot pass the cache while ``held_bound`` plus that size does not. The bound
        is the sum of the final sizes admitted since the set was last empty, and the cache itself
        once an admission needed the full test (which it passed, and with exact lengths the set
        alone never passes the cache: ``RunningPeak.alone_fits``); completions and evictions only
        lower the projection. Each refill from empty (a queue's start, a wave that
        drained) then admits its first items untested: on step 3 of the long chain-of-thought
        replay's plans (766 plays) it skipped 59k of the 212k tests that pass.
        """
        if self.fits_at == (item, self.step):
            self.fits_at = None
            return True
        return self.held_bound + self.prompts[item] + remaining <= self.cap

    def _admit(self) -> None:
        prefill_tokens = 0
        while self.waiting and self._fits(self.waiting[0]):
            item = self.waiting.popleft()
            self.token += 1
            self.alive[item] = (self.token, self.step)
            if self.reserve:
                remaining = expected_remaining(self.steps[item], 0)
                self.peak.add(self.step + remaining, self.prompts[item] - self.step)
                self.held_bound = min(self.held_bound + self.prompts[item] + remaining, self.cap)
            heapq.heappush(self.heap, (self.step + self.steps[item], self.token, item))
            self.stack.append((self.token, item))
            self.batch += 1
            self.offset += self.prompts[item] - self.step
            prefill_tokens += self.prompts[item]
        if prefill_tokens:
            self.clock += self.cost.prefill_time(prefill_tokens)

    def _advance(self) -> None:
        """Run decode steps to the next completion, or to a full KV cache and a preemption."""
        heap = self.heap
        while self.alive.get(heap[0][2], (-1, 0))[0] != heap[0][1]:
            heapq.heappop(heap)
        to_finish = heap[0][0] - self.step
        context = self.offset + self.batch * self.step
        room = (self.cap - context) // self.batch
        run = min(to_finish, room)
        to_fit = self._steps_to_fit(run)
        if to_fit > 0:
            run = to_fit
        if run > 0:
            self.clock += decode_time(self.cost, self.batch, context, run)
            self.step += run
            self.blocked = False
        if run == to_finish:
            while heap and heap[0][0] == self.step:
                _, token, item = heapq.heappop(heap)
                if self.alive.get(item, (-1, 0))[0] == token:
                    self._remove(item)
        elif run != to_fit:
            self._preempt_newest()

    def _steps_to_fit(self, run: int) -> int:
        """Decode steps, fewer than ``run``, after which the refused head of the queue fits (-1:
        not before the next event), as ``WorkerEngine`` plays it: the step a polling sidecar
        starts it at, or vLLM an evicted sequence (it retries its waiting line every step).

        Without ``reserve`` the prompt test only tightens between completions, so only an eviction
        makes room: the evicted sequence may fit one step on. With it (``scheduler.head_fit``)
        nothing is evicted on exact lengths, and waiting lowers the head's projected peak.
        """
        if not self.waiting or run <= 1 or self.batch >= self.cost.max_num_seqs:
            return -1
        if not self.reserve:
            context = self.offset + self.batch * (self.step + 1)
            return 1 if self.blocked and context + self.prompts[self.waiting[0]] <= self.limit else -1
        item, step = self.waiting[0], self.step
        start = step + 1
        if self.refused is not None and self.refused[0] == item:
            if self.refused[2] == step:
                return -1  # refused at the very next step: only a completion helps
            start = max(start, self.refused[1])
        remaining = expected_remaining(self.steps[item], 0)
        fit, bound = earliest_fit(self.peak, start, self.prompts[item], remaining, self.cap, step + run)
        self.refused = (item, bound, -1)
        self.fits_at = None if fit is None else (item, fit)
        return -1 if fit is None else fit - step

    def _preempt_newest(self) -> None:
        self.refused = None  # the evicted sequence had not ended: later projections change
        while True:
            token, item = self.stack.pop()
            if self.alive.get(item, (-1, 0))[0] == token:
                break
        self._remove(item)
        self.waiting.appendleft(item)
        self.blocked = True

    def _remove(self, item: int) -> None:
        _, admitted = self.alive.pop(item)
        self.batch -= 1
        self.offset -= self.prompts[item] - admitted
        if self.reserve:
            self.peak.remove(
                admitted + expected_remaining(self.steps[item], 0), self.prompts[item] - admitted
            )
            if self.batch == 0:
                self.held_bound = 0  # nothing runs: nothing projected

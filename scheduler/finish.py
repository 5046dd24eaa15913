"""Predicted finish time of one worker running its ordered queue: an event-driven continuous batch.

The planner reports, for every worker, when it expects that worker's last trajectory to end. That
figure must come from the same engine model the simulator plays (continuous batching, KV cache as
vLLM manages it), or the plan's makespan would be a promise nobody checks. The worker model:

- Admission, in queue order, at every event: while a slot is free (``running < max_num_seqs``) and
  the prompt fits under the KV cache less a 1% watermark (vLLM's default); with ``reserve`` (the
  plan's ``kv_admission``) only while the KV reserved at every running sequence's *final* length fits.
  Trajectories admitted together are prefilled together, once, before the next decode step.
- Decode: every running sequence appends one token per step; a step costs the cost model's
  ``step_time(b, C)`` at the current batch and context, summed in closed form between events.
- Preemption: when the next step's tokens no longer fit, the newest running sequence is evicted and
  goes back to the head of the queue, its progress lost (vLLM's recompute preemption); no admission
  happens until a decode step has run again, which guarantees progress.

Events are admissions, completions and preemptions, so a worker with ``n`` trajectories costs
``O(n log n)`` Python operations, independent of their lengths.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence

from scheduler.costmodel import WorkerCost
from scheduler.stepsum import decode_time

WATERMARK = 0.01  # share of the KV cache kept free at admission (vLLM's watermark)


def worker_finish(
    cost: WorkerCost, prompts: Sequence[int], steps: Sequence[int], reserve: bool = False
) -> float:
    """Seconds until the worker described by ``cost`` finishes its queue of (prompt, steps) items.

    Items are taken in the given order; every item must fit the KV cache on its own (validated).
    """
    return _WorkerRun(cost, prompts, steps, reserve).run()


def worker_finish_and_order_free(
    cost: WorkerCost, prompts: Sequence[int], steps: Sequence[int], reserve: bool = False
) -> tuple[float, bool]:
    """``worker_finish``, and whether the order was irrelevant: every item admitted at the start.

    When the whole queue fits at once (slots and KV) and nothing is ever preempted, every order of
    the same items gives the same finish, so an order search can stop right there.
    """
    run = _WorkerRun(cost, prompts, steps, reserve)
    finish = run.run()
    return finish, run.admissions == 1 and run.preemptions == 0


class _WorkerRun:
    """The mutable state of one worker's event loop; private so the public API stays one function."""

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
        self.reserved = 0  # sum over running of (prompt + steps): KV at final length
        self.token = 0
        self.blocked = False  # a preemption happened and no decode step has run since
        self.admissions = 0  # scheduling points that admitted something
        self.preemptions = 0  # sequences evicted for lack of KV

    def run(self) -> float:
        """Play events until the queue is empty and nothing runs; return the clock."""
        while True:
            if not self.blocked or self.batch == 0:
                self._admit()
            if self.batch == 0:
                return self.clock
            self._advance()

    def _fits(self, item: int) -> bool:
        if self.batch == 0:
            return True
        if self.batch >= self.cost.max_num_seqs:
            return False
        if self.reserve:
            return self.reserved + self.prompts[item] + self.steps[item] <= self.cap
        context = self.offset + self.batch * self.step
        return context + self.prompts[item] <= self.limit

    def _admit(self) -> None:
        prefill_tokens = 0
        while self.waiting and self._fits(self.waiting[0]):
            item = self.waiting.popleft()
            self.token += 1
            self.alive[item] = (self.token, self.step)
            heapq.heappush(self.heap, (self.step + self.steps[item], self.token, item))
            self.stack.append((self.token, item))
            self.batch += 1
            self.offset += self.prompts[item] - self.step
            self.reserved += self.prompts[item] + self.steps[item]
            prefill_tokens += self.prompts[item]
        if prefill_tokens:
            self.admissions += 1
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
        if run > 0:
            self.clock += decode_time(self.cost, self.batch, context, run)
            self.step += run
            self.blocked = False
        if run == to_finish:
            while heap and heap[0][0] == self.step:
                _, token, item = heapq.heappop(heap)
                if self.alive.get(item, (-1, 0))[0] == token:
                    self._remove(item)
        else:
            self._preempt_newest()

    def _preempt_newest(self) -> None:
        while True:
            token, item = self.stack.pop()
            if self.alive.get(item, (-1, 0))[0] == token:
                break
        self._remove(item)
        self.waiting.appendleft(item)
        self.blocked = True
        self.preemptions += 1

    def _remove(self, item: int) -> None:
        _, admitted = self.alive.pop(item)
        self.batch -= 1
        self.offset -= self.prompts[item] - admitted
        self.reserved -= self.prompts[item] + self.steps[item]

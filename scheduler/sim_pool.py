"""Many workers on one clock: the coordinator for work stealing and shared-queue dispatch.

Static plans without stealing need none of this (each worker plays its own queue alone). When
workers interact, their events are merged on one deterministic heap ordered by (time, counter),
SimPy style: equal times are served in the order they were scheduled, so a replay is reproducible
bit for bit. All workers whose events fall at the same instant are handled as one batch: each applies
its event and admits from its own queue; then those with a free slot and an empty queue acquire work
one item at a time, the least-loaded (fewest running, then inventory order) first, which is how
sidecars polling concurrently share a queue. Acquisition takes the shared queue's head when there is
one, else (with stealing) the TAIL of the queue with the most predicted work remaining, scaled by
that victim's speed, the rule of the delivery layer: the longest items, at the head, stay with their
planned owner, and only queued (never running) items move.

A worker that ends up with nothing to run goes idle and is woken only when new work can appear for
it: a preemption puts an item back on a queue, which a thief may then take.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence

from scheduler.sim_engine import WorkerEngine


class Pool:
    """The engines of one simulation plus what they share (a FIFO, the steal rule)."""

    def __init__(
        self, engines: Sequence[WorkerEngine], shared: deque[int], speeds: Sequence[float], steal: bool
    ) -> None:
        self.engines = list(engines)
        self.shared = shared  # the shared FIFO of a shared-queue plan (empty for static plans)
        self.speeds = list(speeds)  # each worker's token rate: turns queued tokens into seconds
        self.steal = steal
        self.steals = 0  # items moved by stealing
        self._heap: list[tuple[float, int, int]] = []  # (event time, counter, worker index)
        self._counter = 0
        self._pending = [False] * len(self.engines)  # worker has an event computed and not applied
        self._idle: set[int] = set()

    def run(self) -> None:
        """Play every worker until all are idle; workers all start at time 0."""
        for index in range(len(self.engines)):
            self._schedule(0.0, index)
        heap = self._heap
        while heap:
            now = heap[0][0]
            batch: list[int] = []
            while heap and heap[0][0] == now:
                batch.append(heapq.heappop(heap)[2])
            self._handle(now, batch)

    def _schedule(self, when: float, index: int) -> None:
        self._counter += 1
        heapq.heappush(self._heap, (when, self._counter, index))

    def _handle(self, now: float, batch: list[int]) -> None:
        """Apply one instant's events, let the workers involved take work, and schedule them again."""
        engines, preempted = self.engines, 0
        for index in batch:
            engine = engines[index]
            if self._pending[index]:
                before = engine.preempted
                engine.process()
                preempted += engine.preempted - before
            else:
                engine.clock = max(engine.clock, now)  # woken from idle (or the start)
            engine.admit_own()
        self._acquire([engines[i] for i in batch])
        for index in batch:
            when = engines[index].commit()
            self._pending[index] = when is not None
            if when is None:
                self._idle.add(index)
            else:
                self._schedule(when, index)
        if preempted and self.steal and self._idle:
            for index in sorted(self._idle):
                self._schedule(now, index)
            self._idle.clear()

    def _acquire(self, engines: list[WorkerEngine]) -> None:
        """Hand out shared or stolen items one at a time, least-loaded taker first."""
        if not self.shared and not self.steal:
            return
        takers = [(e.batch, e.index, e) for e in engines if not e.queue and e.may_admit()]
        heapq.heapify(takers)
        while takers:
            _, index, engine = heapq.heappop(takers)
            if self.shared:
                if not engine.offer(self.shared[0]):
                    continue
                self.shared.popleft()
            elif not self._steal_into(engine):
                continue
            if engine.may_admit():
                heapq.heappush(takers, (engine.batch, index, engine))

    def _steal_into(self, thief: WorkerEngine) -> bool:
        """Move the tail item of the most-loaded victim to ``thief`` if it can start it now."""
        victim = self._victim(thief.index)
        if victim is None:
            return False
        item = victim.queue[-1]
        if not thief.offer(item):
            return False
        victim.queue.pop()
        victim.queued_work -= thief.ledger.planned[item]
        thief.ledger.stolen[item] = True
        self.steals += 1
        return True

    def _victim(self, thief: int) -> WorkerEngine | None:
        """The worker with the most predicted seconds of queued work (ties: lowest index)."""
        best, best_score = None, 0.0
        for engine in self.engines:
            if engine.index == thief or not engine.queue:
                continue
            score = engine.queued_work / self.speeds[engine.index]
            if best is None or score > best_score:
                best, best_score = engine, score
        return best

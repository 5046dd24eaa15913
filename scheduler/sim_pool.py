"""Many workers on one clock: the coordinator for work stealing and shared-queue dispatch.

Static plans without stealing need none of this (each worker plays its own queue alone). When
workers interact, their events are merged on one deterministic heap ordered by (time, counter),
SimPy style: equal times are served in the order they were scheduled, so a replay is reproducible
bit for bit. All workers whose events fall at the same instant are handled as one batch: each applies
its event and claims from its own queue; then those whose sidecar has room (``WorkerEngine.has_room``)
take work one item at a time, the least-loaded (fewest in flight, then inventory order) first, which
is how sidecars polling concurrently share a queue. Work comes from the shared queue's head when there
is one, else (with stealing) from the TAIL of the queue with the most predicted work remaining,
scaled by that victim's speed, the rule of the delivery layer: the longest items, at the head, stay
with their planned owner, a thief takes an item only if it fits its KV cache beside everything it has
in flight, all at PREDICTED final lengths (``WorkerEngine.reservation_fits``: a free slot is no sign
of spare capacity when KV binds), and only unclaimed items move (never running ones, nor those already
handed to an engine, preempted ones included, nor a trajectory pinned to its worker: a pinned tail
shields its queue from that thief for the moment).

Queues only shrink, so a worker that finds nothing to take stays without new work: it is simply not
scheduled again until its running sequences produce an event, and an empty worker goes idle for good.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence

from scheduler.sim_engine import WorkerEngine, play_out


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
        self._dry = not steal  # no unclaimed item left anywhere to steal (queues only shrink)
        self._unclaimed = sum(len(e.queue) for e in self.engines)  # items in workers' own queues
        self._heap: list[tuple[float, int, int]] = []  # (event time, counter, worker index)
        self._counter = 0
        self._pending = [False] * len(self.engines)  # worker has an event computed and not applied

    def run(self) -> None:
        """Play every worker until none has anything left to run; all start at time 0."""
        for index in range(len(self.engines)):
            self._schedule(0.0, index)
        heap = self._heap
        while heap and not self._independent():
            now = heap[0][0]
            batch: list[int] = []
            while heap and heap[0][0] == now:
                batch.append(heapq.heappop(heap)[2])
            self._handle(now, batch)
        for engine in self.engines:  # nothing left to share: each worker finishes on its own
            if self._pending[engine.index]:
                play_out(engine, engine.event_clock)

    def _independent(self) -> bool:
        """No item can move between workers any more, so their futures no longer interact."""
        if self.shared:
            return False
        if self._unclaimed == 0:
            self._dry = True  # queues only shrink: nothing will ever be stealable again
        return self._dry

    def _schedule(self, when: float, index: int) -> None:
        self._counter += 1
        heapq.heappush(self._heap, (when, self._counter, index))

    def _handle(self, now: float, batch: list[int]) -> None:
        """Apply one instant's events, let the workers involved take work, and schedule them again."""
        engines = self.engines
        for index in batch:
            engine = engines[index]
            if self._pending[index]:
                engine.process()
            queued = len(engine.queue)
            engine.admit_own()
            self._unclaimed -= queued - len(engine.queue)
        self._acquire([engines[i] for i in batch])
        for index in batch:
            when = engines[index].commit()
            self._pending[index] = when is not None
            if when is not None:
                self._schedule(when, index)

    def _acquire(self, engines: list[WorkerEngine]) -> None:
        """Hand out shared or stolen items one at a time, least-loaded taker first."""
        if not self.shared and self._dry:
            return
        takers = [(e.batch + len(e.waiting), e.index, e) for e in engines if e.has_room()]
        heapq.heapify(takers)
        while takers:
            _, index, engine = heapq.heappop(takers)
            if self.shared:
                if not engine.take(self.shared[0]):
                    continue
                self.shared.popleft()
            else:
                victim = self._victim(index)
                if victim is None:  # the taker's own queue is empty, so nothing is left anywhere
                    self._dry = True
                    return
                if not self._steal(victim, engine):
                    continue
            if engine.has_room():
                heapq.heappush(takers, (engine.batch + len(engine.waiting), index, engine))

    def _steal(self, victim: WorkerEngine, thief: WorkerEngine) -> bool:
        """Move the victim's tail item to ``thief`` if the thief accepts it now."""
        item = victim.queue[-1]
        if thief.ledger.pin[item] >= 0:  # a pinned item never moves
            return False
        if not thief.reservation_fits(item) or not thief.take(item):  # the KV steal gate, then the engine
            return False
        victim.queue.pop()
        self._unclaimed -= 1
        victim.queued_work -= thief.ledger.planned[item]
        thief.ledger.stolen[item] = True
        self.steals += 1
        return True

    def _victim(self, thief: int) -> WorkerEngine | None:
        """The worker with the most predicted seconds of unclaimed work (ties: lowest index)."""
        best, best_score = None, 0.0
        for engine in self.engines:
            if engine.index == thief or not engine.queue:
                continue
            score = engine.queued_work / self.speeds[engine.index]
            if best is None or score > best_score:
                best, best_score = engine, score
        return best

"""Many workers on one clock: the coordinator for work stealing and shared-queue dispatch.

Static plans without stealing need none of this (each worker plays its own queue alone).

One clock. When workers interact, their events are merged on one deterministic heap ordered by
(time, counter), SimPy style: equal times are served in the order they were scheduled, so a replay
is reproducible bit for bit. All workers whose events fall at the same instant are handled as one
batch: each applies its event and claims from its own queue; then those whose sidecar has room
(``WorkerEngine.has_room``) take work one claim or steal call at a time, the least-loaded (fewest
in flight, then inventory order) first, which is how sidecars polling concurrently share a queue.

Where work comes from. The shared queue's head when there is one; else, with stealing, the TAIL of
the queue with the most predicted work remaining, scaled by that victim's speed (or the next such
queue, up to ``STEAL_VICTIMS``, while a tail can never go to that thief: ``_steal_from``). That is
the delivery layer's rule, and one steal takes what one call of it takes (``scheduler.sim_steal``):
up to the thief's free slots (one under KV admission) and half the victim's queue, from that one
victim; a thief with room left steals again, as its sidecar does, choosing the victim anew:

- the items at a queue's head, which its owner starts first, stay with it (a queue's order is
  ``scheduler.policies.ordering``'s choice, not always longest-first);
- a thief takes an item only if it fits its KV cache beside everything it has in flight and the
  items this call took before it, all at PREDICTED final lengths (the KV steal gate: a free slot is
  no sign of spare capacity when KV binds); the first refused ends the call;
- for a static plan, only if it would finish the item before its owner would, by the plan's
  per-item deadlines (the deadline guard: ``scheduler.sim_guard`` and ``scheduler.deadlines``; a
  refused thief's turn ends, as with a KV refusal);
- only unclaimed items move: never running ones, nor those already handed to an engine, preempted
  ones included, nor a trajectory pinned to its worker. The thief passes over pinned tail items and
  those too big for its cache, any number of them, and takes the nearest one before them that it
  may (under prefix affinity within ``STEAL_SCAN`` unpinned items of the tail); it tries the next
  queue only when there is none.

What the request constrains, the pool honours (``SimOptions``): an excluded (draining) worker never
takes from the shared queue and never steals (its own planned queue, if any, it still runs and may be
robbed of). Under prefix affinity a group's samples stay on one worker: the worker that takes a
group's first sample from the shared queue takes the rest of that group into its own queue (so it
takes that sample only if its KV cache holds every sample of the group, ``_holds``), and a steal
moves a whole group, the one nearest the victim's tail that may move, only when none of its samples
has left the victim's queue (none claimed, running or done) and the whole group passes the KV steal
gate together. A group that cannot move (a sample pinned, or part of it claimed) is passed over for
the group before it, as a pinned item is, as is one with a sample too big for the thief; one the KV
gate or the deadline guard refuses ends its turn. So no play splits a group, which the affinity
lower bound (the heaviest group alone on its best worker, the tail cover by whole groups) assumes.

Queues only shrink, so a worker that finds nothing to take stays without new work: it is simply not
scheduled again until its running sequences produce an event. The one exception is a shared head it
could not hold: a worker left with nothing running behind it is woken (``_idle``) when another worker
takes that head, at that instant, as its polling sidecar would claim what follows.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence

from scheduler.sim_alone import play_out
from scheduler.sim_engine import WorkerEngine
from scheduler.sim_guard import in_time
from scheduler.sim_steal import Steal, tail_batch, unpinned_tail

# Queues one steal looks at, busiest first (steal.lua's VICTIMS): enough to get past a few queues with
# nothing for this thief, while a steal stays O(workers), not a walk over every queue's tail.
STEAL_VICTIMS = 4


class Pool:
    """The engines of one simulation plus what they share (a FIFO, the steal rule)."""

    def __init__(
        self,
        engines: Sequence[WorkerEngine],
        shared: deque[int],
        speeds: Sequence[float],
        steal: bool,
        *,
        excluded: frozenset[int] = frozenset(),
        affinity: bool = False,
        planned: tuple[Sequence[float], Sequence[float]] | None = None,
    ) -> None:
        self.engines = list(engines)
        self.shared = shared  # the shared FIFO of a shared-queue plan (empty for static plans)
        self.speeds = list(speeds)  # each worker's token rate: turns queued tokens into seconds
        self.excluded = excluded  # worker indices that never take work from elsewhere (draining)
        self.affinity = affinity  # keep each group on one worker (shared queue and stealing)
        # each item's predicted (start, end) on its planned worker (scheduler.deadlines); None: no
        # steal deadlines (a shared-queue plan), so steals are not time-guarded
        self.planned = planned
        self._gone: set[int] = set()  # shared items already bound to a worker with their group
        self._shared_groups: dict[int, list[int]] = {}  # group -> its items in the shared FIFO
        self._sizes: dict[int, int] = {}  # group -> its number of items (filled on first steal)
        self._largest: dict[int, int] = {}  # group -> the most KV one of its items needs (the same)
        self._group_need: dict[int, int] = {}  # group -> the most KV one of its shared items needs
        if affinity:
            group = engines[0].ledger.group if engines else []
            for item in shared:
                self._shared_groups.setdefault(group[item], []).append(item)
            need = engines[0].ledger.need if engines else []
            for g, items in self._shared_groups.items():
                self._group_need[g] = max(need[i] for i in items)
        self.steals = 0  # items moved by stealing
        self._dry = not steal  # nothing to steal: stealing is off, or no unclaimed item is left anywhere
        # (queues only shrink, so once dry a pool stays dry)
        self._unclaimed = sum(len(e.queue) for e in self.engines)  # items in workers' own queues
        self._heap: list[tuple[float, int, int]] = []  # (event time, counter, worker index)
        self._counter = 0
        self._pending = [False] * len(self.engines)  # worker has an event computed and not applied
        self._idle: set[int] = set()  # workers with nothing running, passed over by a shared head

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
            engine.watch = -1
            if self._pending[engine.index]:
                play_out(engine, engine.event_clock)

    def _independent(self) -> bool:
        """No item can move between workers any more, so their futures no longer interact."""
        if self._shared_head() is not None:
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
            engine.watch = -1  # ``_acquire`` names what it refuses this time
        woken = self._acquire([engines[i] for i in batch], now)
        for index in (*batch, *woken):
            when = engines[index].commit()
            self._pending[index] = when is not None
            if when is not None:
                self._schedule(when, index)

    def _acquire(self, engines: list[WorkerEngine], now: float) -> list[int]:
        """Hand out shared items one at a time and stolen ones a steal call at a time, least-loaded
        taker first; return the idle workers (not among ``engines``) that a new shared head woke and
        that took work, to commit."""
        if self._shared_head() is None and self._dry:
            return []
        takers = [
            (e.batch + len(e.waiting), e.index, e)
            for e in engines
            if e.index not in self.excluded and e.has_room()
        ]
        heapq.heapify(takers)
        too_small: list[tuple[int, int, WorkerEngine]] = []  # cannot hold the head; may take the next
        woken: list[int] = []
        while takers:
            taker = heapq.heappop(takers)
            _, index, engine = taker
            head = self._shared_head()
            if head is not None:
                if not self._holds(engine, head):
                    too_small.append(taker)  # the head waits for a worker that can hold it
                    continue
                if not engine.take(head):
                    engine.watch = head  # it starts at the first step it fits (``WorkerEngine.commit``)
                    continue
                self.shared.popleft()
                if self.affinity:
                    self._bind_group(head, engine)
                for waiting in (*too_small, *self._wake(now, woken)):  # a new head: those set aside
                    heapq.heappush(takers, waiting)  # (and idle workers) may hold this one
                too_small.clear()
            else:
                victims = self._victims(index)
                if not victims:  # the taker's own queue is empty, so nothing is left anywhere
                    self._dry = True
                    return woken
                if not self._steal_from(victims, engine):
                    continue
            if engine.has_room():
                heapq.heappush(takers, (engine.batch + len(engine.waiting), index, engine))
        self._idle.update(i for _, i, e in too_small if e.batch == 0 and not e.waiting)
        return woken

    def _wake(self, now: float, woken: list[int]) -> list[tuple[int, int, WorkerEngine]]:
        """Idle workers set aside by an earlier head, as takers for a new one, their clocks caught up
        to ``now`` (idle time: not busy, and a finish is read from the ledger, not the clock). They
        have no event of their own, so ``woken`` records them for the caller to commit."""
        waking = [(0, i, self.engines[i]) for i in sorted(self._idle)]
        self._idle.clear()
        for _, index, engine in waking:
            engine.clock = max(engine.clock, now)
            if index not in woken:
                woken.append(index)
        return waking

    def _shared_head(self) -> int | None:
        """The shared FIFO's next item, skipping items already bound with their group; None: empty."""
        shared, gone = self.shared, self._gone
        while shared and shared[0] in gone:
            shared.popleft()
        return shared[0] if shared else None

    def _holds(self, engine: WorkerEngine, head: int) -> bool:
        """Whether ``engine`` may take the shared ``head``: its KV cache holds the head at its cap and,
        under prefix affinity, every sample of the head's group, since taking the head binds them all
        to it (``_bind_group``). A group is too big for a worker if any of its samples is, as a single
        item is; it waits for a worker that holds it all.

        Under affinity the head is always its group's first sample still shared (taking it binds the
        rest), so the group's remaining samples are all its shared ones: their largest need decides.
        """
        if not self.affinity:
            return engine.can_hold(head)
        return self._group_need[engine.ledger.group[head]] <= engine.cap

    def _bind_group(self, item: int, engine: WorkerEngine) -> None:
        """Prefix affinity: the rest of ``item``'s group leaves the shared FIFO for ``engine``'s queue."""
        rest = [i for i in self._shared_groups.get(engine.ledger.group[item], []) if i != item]
        rest = [i for i in rest if i not in self._gone]
        self._gone.update(rest)
        self._claim_into(engine, rest)

    def _claim_into(self, engine: WorkerEngine, items: list[int]) -> None:
        """Put ``items`` in ``engine``'s own queue and let its sidecar claim what it can now."""
        engine.enqueue(items)
        queued = len(engine.queue)
        engine.admit_own()
        self._unclaimed += len(items) - (queued - len(engine.queue))

    def _steal_from(self, victims: list[WorkerEngine], thief: WorkerEngine) -> bool:
        """Steal from the first of ``victims`` that has something for ``thief``; whether it took one.

        A victim with nothing this thief can ever take (under affinity, within ``STEAL_SCAN``) is
        passed over for the next:
        with only the busiest considered, a small worker starved while a queue it could drain waited
        behind one holding only items too big for it (two dead big workers, small ones idle). A
        refusal that time lifts ends the turn at the first victim, as before (docs/simulator.md).
        """
        for victim in victims:
            outcome = self._steal(victim, thief)
            if outcome is not Steal.SKIP:
                return outcome is Steal.TAKEN
        return False

    def _steal(self, victim: WorkerEngine, thief: WorkerEngine) -> Steal:
        """Move a batch of the victim's tail items (a group, under prefix affinity) to ``thief``.

        Without affinity one call takes what ``sim_steal.tail_batch`` says, steal.lua's rule: up to
        the thief's free slots (one under KV admission) and half the victim's queue, from its tail,
        all from this victim, in one call; the thief's next call (it still has room) may pick another
        victim. A pinned item never moves, nor one too big for the thief's cache, but neither shields
        its queue: the thief takes the nearest items before them, however many there are; under
        prefix affinity the nearest group that may move, within ``STEAL_SCAN`` unpinned items of the
        tail of groups the thief holds whole (``sim_steal.unpinned_tail``; index.lua's ``P:gneed``).
        A dead worker's pinned group planned last kept every item of its queue from idle thieves; a
        long prompt at the tail kept it from every small cache (docs/simulator.md, "Pins", "Items a
        worker cannot hold"; the history: docs/experiments.md, "Stealing past items a thief may
        never take").
        """
        if self.affinity:
            return self._steal_group(victim, thief)
        backs, outcome = tail_batch(victim, thief, self.planned)
        queue, ledger = victim.queue, thief.ledger
        taken: list[int] = []
        for back in backs:  # tail first, as steal.lua leases them; KV admission may refuse (one item)
            if not thief.take(queue[-back]):
                break
            taken.append(back)
        if not taken:
            return Steal.STOP if backs else outcome
        for back in reversed(taken):  # farthest from the tail first: the nearer keep their positions
            item = queue[-back]
            del queue[-back]
            victim.queued_work -= ledger.planned[item]
            ledger.stolen[item] = True
        self._unclaimed -= len(taken)
        self.steals += len(taken)
        return Steal.TAKEN

    def _steal_group(self, victim: WorkerEngine, thief: WorkerEngine) -> Steal:
        """Move the group nearest the victim's tail that may move, within ``STEAL_SCAN`` of it; each
        group is judged once, at its tail-most member (``_move_group``)."""
        group, judged = thief.ledger.group, set[int]()
        largest = self._group_stats()[1]

        def held(item: int) -> bool:  # the thief holds the item's whole group
            return largest[group[item]] <= thief.cap

        for _, item in unpinned_tail(victim.queue, thief.ledger.pin, held):
            g = group[item]
            if g not in judged:
                judged.add(g)
                outcome = self._move_group(victim, thief, g, [i for i in victim.queue if group[i] == g])
                if outcome is not Steal.PASS:
                    return outcome
        return Steal.SKIP

    def _move_group(self, victim: WorkerEngine, thief: WorkerEngine, group: int, members: list[int]) -> Steal:
        """Move a whole group from the victim's queue to the thief's, if none of it has started."""
        ledger = thief.ledger
        if len(members) != self._group_size(group) or any(ledger.pin[i] >= 0 for i in members):
            return Steal.PASS  # part of the group is claimed, running or done on its owner: it stays
        if not all(thief.can_hold(i) for i in members):
            return Steal.PASS  # a sample too big for the thief's cache stays, as a pinned one
        if not thief.reservations_fit(members) or not in_time(self.planned, victim, thief, members):
            return Steal.STOP  # the KV steal gate and the deadline guard, for the group together
        victim.queue = deque(i for i in victim.queue if ledger.group[i] != group)
        victim.queued_work -= sum(ledger.planned[i] for i in members)
        self._unclaimed -= len(members)
        for i in members:
            ledger.stolen[i] = True
        self.steals += len(members)
        self._claim_into(thief, members)
        return Steal.TAKEN

    def _group_size(self, group: int) -> int:
        """How many items ``group`` has in the whole batch: a group may be stolen only whole, so a
        victim's queue holding fewer of them means part of it already started."""
        return self._group_stats()[0][group]

    def _group_stats(self) -> tuple[dict[int, int], dict[int, int]]:
        """Each group's size and the most KV one of its items needs (counted on the first
        steal under affinity, as most plays never steal a group)."""
        if not self._sizes:
            ledger = self.engines[0].ledger
            for g, need in zip(ledger.group, ledger.need, strict=True):
                self._sizes[g] = self._sizes.get(g, 0) + 1
                self._largest[g] = max(self._largest.get(g, 0), need)
        return self._sizes, self._largest

    def _victims(self, thief: int) -> list[WorkerEngine]:
        """The ``STEAL_VICTIMS`` workers with the most predicted seconds of unclaimed work, most first
        (ties: lowest index); empty when no other worker has unclaimed work."""
        candidates = [e for e in self.engines if e.index != thief and e.queue]
        return heapq.nsmallest(
            STEAL_VICTIMS, candidates, key=lambda e: (-e.queued_work / self.speeds[e.index], e.index)
        )

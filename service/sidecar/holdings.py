"""What a sidecar holds right now, and whether it may take on more: slot and KV admission control.

Pure bookkeeping, no I/O, so the admission rule is testable on its own. An engine runs at most
``max_in_flight`` sequences (its ``max_num_seqs``). When a schedule asks for KV admission control,
an item starts only while the projected KV peak of what runs (every schedule's: they share the
cache), each running sequence growing one token per step until its predicted length, plus the new
item, fits ``kv_capacity_tokens``
(``scheduler.admission``, the rule the simulator and the planner's finish model play): the engine
then does not run out of KV mid-generation, and the cache stays as full as that allows.

The engine is called without streaming, so how far a running sequence has got is estimated: its
time since start times the per-sequence decode rate measured on this sidecar's completions
(tokens over wall time); one past its predicted length is expected to run a quarter of it again
(``scheduler.admission.expected_remaining``, as the simulator assumes). Until a first completion
gives that rate, each running item is counted at its predicted final length all at once
(``prompt_tokens + min(predicted_tokens, max_new_tokens)``, the conservative reservation). An item
larger than the whole cache still starts when nothing else runs, so nothing can wait forever.
Stealing is gated by KV always, whatever the schedule's admission mode (``steal_budget``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from scheduler.admission import expected_remaining, peak_fits
from service.delivery.records import DeliveryItem, Lease, TrajectoryResult

LeaseId = tuple[str, str, int]  # (schedule id, item key, token): a re-claimed item is a new lease


def reservation_tokens(item: DeliveryItem) -> int:
    """KV tokens an item will hold at its predicted final length (``DeliveryItem.reservation_tokens``)."""
    return item.reservation_tokens


def _predicted(item: DeliveryItem) -> float:
    return min(item.predicted_tokens, float(item.max_new_tokens))


def lease_id(lease: Lease) -> LeaseId:
    """The holdings key of a lease."""
    return (lease.schedule_id, lease.key, lease.token)


@dataclass
class Held:
    """One lease the sidecar holds."""

    lease: Lease  # current lease (deadline refreshed by heartbeats)
    reserved_tokens: int  # KV reserved while running (0 when KV admission is off for its schedule)
    started: bool = False  # sent to the engine / handed to the worker
    completing: bool = False  # its completion or failure report is being sent: a missing heartbeat is no loss
    # forgotten as ended without a report (found gone at a heartbeat, dropped as cancelled) and counted
    # so: no completion, failure or hand-back of it is sent, so it is not counted again as refused
    ended: bool = False
    # a completion sent whose answer never came (pull mode keeps the lease for the worker's retry, push
    # mode forgets it): it may have landed, so it is sent again to learn how it ended (``resends.py``)
    unanswered: TrajectoryResult | None = None
    # pull: its hold bound's failure report went unanswered, so it is held again for the next beat to
    # send that report once more, unless a worker's report of it comes first (``PullState.abandon``)
    failing: bool = False
    # the reason of its failure report in flight or unanswered, sent again with it (push: ``resends.py``;
    # pull: the next beat, ``failing``); Redis answers a repeat of a taken failure DUPLICATE
    failure: str = ""
    started_at: float = 0.0  # the holdings' clock when it started
    occupancy_at_start: float = 0.0  # the holdings' in-flight integral (sequence-seconds) then


@dataclass
class Holdings:
    """The leases of one sidecar: waiting to start, running, or being completed."""

    max_in_flight: int  # the engine's concurrent-sequence limit
    kv_capacity_tokens: int | None = None  # the engine's KV cache; None disables KV admission
    clock: Callable[[], float] = time.monotonic  # seconds; injected so occupancy is testable
    _held: dict[LeaseId, Held] = field(default_factory=dict, init=False)
    _occupancy: float = field(default=0.0, init=False)  # integral of in-flight count over time
    _occupancy_at: float | None = field(default=None, init=False)  # clock of the last integration
    _decoded_tokens: float = field(default=0.0, init=False)  # output tokens of observed completions
    _decode_s: float = field(default=0.0, init=False)  # their wall time, summed

    def __len__(self) -> int:
        return len(self._held)

    def free_slots(self) -> int:
        """Slots left for new claims (waiting leases occupy a slot too; a ``failing`` one does not)."""
        return max(0, self.max_in_flight - len(self._engine()))

    def _engine(self) -> list[Held]:
        """The holdings on the engine's slots and KV cache: all but the ``failing`` (pull) leases,
        which the worker was told it lost and which are held only until their failure report is
        answered (``PullState.abandon``). A report Redis answers frees the slot at once; one it did not
        answer kept it, 204 to ``/next`` until the next beat, and counted in every item's measured
        concurrency a sequence the worker no longer ran. A copy, taken at once (``in_flight``)."""
        return [h for h in list(self._held.values()) if not h.failing]

    def reserved(self) -> int:
        """KV tokens the started items hold at their predicted final lengths, every schedule's: the
        engine's cache holds them all, whatever admission mode each schedule asked for."""
        return sum(reservation_tokens(h.lease.item) for h in self._engine() if h.started)

    def steal_budget(self) -> int | None:
        """KV tokens a steal may still take on: the KV steal gate (docs/simulator.md).

        The cache minus the reservations, at predicted final lengths, of EVERY held lease (waiting
        or running, whatever the schedule's admission mode): a free slot says nothing when the cache
        is already spoken for, and a thief that stole regardless would make its engine evict. None
        when the KV capacity is unknown: then only slots limit stealing.
        """
        if self.kv_capacity_tokens is None:
            return None
        held = sum(reservation_tokens(h.lease.item) for h in self._engine())
        return self.kv_capacity_tokens - held

    def add(self, lease: Lease, kv_admission: bool) -> Held:
        """Record a new lease, not started yet."""
        use_kv = kv_admission and self.kv_capacity_tokens is not None
        held = Held(lease, reservation_tokens(lease.item) if use_kv else 0)
        self._held[lease_id(lease)] = held
        return held

    def can_start(self, held: Held) -> bool:
        """Whether ``held`` may start now without overcommitting the KV cache (module docstring)."""
        if held.reserved_tokens == 0 or self.kv_capacity_tokens is None:
            return True
        running = [h for h in self._engine() if h.started]  # every schedule's: one cache
        if not running:
            return True  # nothing runs: even an item larger than the cache starts, nothing waits forever
        rate = self.decode_rate()
        if rate is None:
            return self.reserved() + held.reserved_tokens <= self.kv_capacity_tokens
        now = self.clock()
        contexts, remaining = [], []
        for h in running:
            item = h.lease.item
            done = int(min(rate * max(0.0, now - h.started_at), float(item.max_new_tokens)))
            contexts.append(item.prompt_tokens + done)
            remaining.append(expected_remaining(math.ceil(_predicted(item)), done))
        item = held.lease.item
        return peak_fits(
            contexts, remaining, item.prompt_tokens, math.ceil(_predicted(item)), self.kv_capacity_tokens
        )

    def start_fitting(self) -> list[Held]:
        """Start the waiting leases in claim order while each may start (``can_start``); the started.

        First come, first served, as the simulator's engine admits its queue (vLLM's in-order rule):
        the first that does not fit stops the rest, so a later, smaller item never jumps a large one
        that would then wait behind a stream of small ones.
        """
        started: list[Held] = []
        for held in self.waiting():
            if not self.can_start(held):
                break
            self.start(held)
            started.append(held)
        return started

    def busy_ms(self, rate: float | None) -> int:
        """How long the work held now still takes at ``rate`` tokens/s per sequence, ms (the steal
        deadline guard's view of the thief): the longest predicted remainder of its leases, each
        started one counted from its start (as KV admission estimates progress); 0 without a rate."""
        if not rate:
            return 0
        now, longest = self.clock(), 0.0
        for held in self._engine():
            left = _predicted(held.lease.item)
            if held.started:
                left -= rate * max(0.0, now - held.started_at)
            longest = max(longest, left / rate)
        return int(longest * 1000)

    def observe(self, output_tokens: int, wall_time_s: float) -> None:
        """Learn the per-sequence decode rate from a completion (what KV admission needs)."""
        if output_tokens > 0 and wall_time_s > 0:
            self._decoded_tokens += output_tokens
            self._decode_s += wall_time_s

    def decode_rate(self) -> float | None:
        """Output tokens per second of one sequence on this engine, measured; None before any."""
        return self._decoded_tokens / self._decode_s if self._decode_s > 0 else None

    def start(self, held: Held) -> None:
        """Mark ``held`` as sent to the engine (or handed to the worker) now."""
        self._integrate()
        held.started = True
        held.started_at = self._occupancy_at or 0.0
        held.occupancy_at_start = self._occupancy

    def mean_concurrency(self, held: Held) -> float:
        """Mean number of sequences in flight (``held`` included) since ``held`` started.

        What speed learning needs beside an item's wall time (``service/speeds/learner.py``): a trajectory
        decoded beside 100 others is slower than one decoded alone, and without the batch it ran in
        its wall time says nothing about the worker's speed.
        """
        self._integrate()
        now = self._occupancy_at or 0.0
        if not held.started or now <= held.started_at:
            return float(max(1, self.in_flight()))
        return max(1.0, (self._occupancy - held.occupancy_at_start) / (now - held.started_at))

    def held_for(self, held: Held) -> float:
        """Seconds since ``held`` started (0 before): the interval ``mean_concurrency`` covers, so a
        wall time and a concurrency measured by the sidecar describe the same span of the engine."""
        return max(0.0, self.clock() - held.started_at) if held.started else 0.0

    def in_flight(self) -> int:
        """Leases started (sent to the engine, or handed to the worker): what the engine holds, which
        ``len`` overstates by the leases claimed ahead and still waiting to start. The health server's
        thread reads it while the loop adds and removes leases: it counts a copy of the values, taken
        at once under the GIL, as iterating the dict itself raised "changed size during iteration".
        Not the ``failing`` leases (``_engine``)."""
        return sum(1 for h in self._engine() if h.started)

    def handed(self) -> list[Held]:
        """Leases started that are still the worker's (pull mode: ``GET /leases``'s ``held``): not one
        listed lost past its hold bound whose failure report waits for Redis (``failing``), held here
        only to send that report again. ``/health`` and the ``held`` gauge counted it held, where
        ``/leases`` did not list it. In push mode the same as the started ones (nothing is failing)."""
        return [h for h in list(self._held.values()) if h.started and not h.failing]

    def _integrate(self) -> None:
        """Add the in-flight count times the time since the last change; call BEFORE changing it."""
        now = self.clock()
        if self._occupancy_at is not None:
            self._occupancy += self.in_flight() * (now - self._occupancy_at)
        self._occupancy_at = now

    def all(self) -> list[Held]:
        """Every holding, oldest first."""
        return list(self._held.values())

    def waiting(self) -> list[Held]:
        """Leases claimed but not started, oldest first (a copy taken at once: ``in_flight``)."""
        return [h for h in list(self._held.values()) if not h.started]

    def get(self, key: LeaseId) -> Held | None:
        """The holding of one lease, if still held."""
        return self._held.get(key)

    def restore(self, held: Held) -> None:
        """Hold again a lease ``remove`` forgot, as it was (started, its clock and occupancy kept)."""
        self._integrate()
        self._held[lease_id(held.lease)] = held

    def remove(self, key: LeaseId) -> Held | None:
        """Forget a lease (completed, failed, released or lost)."""
        self._integrate()
        return self._held.pop(key, None)

    def schedules(self) -> set[str]:
        """Schedule ids of the held leases."""
        return {sid for sid, _, _ in self._held}

    def leases(self) -> list[Lease]:
        """Every held lease, for heartbeats."""
        return [h.lease for h in self._held.values()]

    def refresh(self, alive: list[Lease]) -> None:
        """Store the new deadlines a heartbeat returned."""
        for lease in alive:
            held = self._held.get(lease_id(lease))
            if held is not None:
                held.lease = lease

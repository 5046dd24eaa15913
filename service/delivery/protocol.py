"""The typed Python API of the delivery protocol: one method per atomic Lua step.

The service publishes and reads progress, sidecars claim/heartbeat/complete/steal/release, reapers
reap, the trainer reads results; all through ``Delivery``. Every mutating method is one EVALSHA on
keys of one hash slot, so it is atomic on a single server and on Redis Cluster alike. The plain
reads (announced schedules, settings, progress, results) are ``DeliveryViews``, the indexes that
announce a schedule to its workers and reapers ``DeliveryIndexes``, and how a script is called
``ScriptCalls`` (``calls``), a request's in-flight mark ``PlanningMarks`` (``marks``); it inherits
all four. Every worker id an operation names is checked
before anything is sent (``calls.worker``): ``InvalidInputError`` naming it.

Time: by default every script reads the server's clock (``TIME``), so leases do not depend on the
clocks of workers or replicas. Each method also takes ``now_ms`` to pin the clock explicitly, which
tests and simulations use to drive expiry deterministically; do not mix both styles on one schedule.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from functools import partial
from typing import Any

from service.delivery import announcing, wire
from service.delivery import keys as keyspace
from service.delivery.calls import by_holder, worker
from service.delivery.errors import UnknownScheduleError
from service.delivery.marks import PlanningMarks
from service.delivery.outcomes import (
    CancelReport,
    CompletionOutcome,
    PublishOutcome,
    ReapReport,
    ReleaseOutcome,
    ResetReport,
)
from service.delivery.reach import Reach
from service.delivery.records import DeliveryItem, Lease, PublishedSchedule, TrajectoryResult
from service.delivery.views import text

_COMPLETE_CODES = {1: CompletionOutcome.ACCEPTED, 2: CompletionOutcome.DUPLICATE, 0: CompletionOutcome.STALE}
_RELEASE_CODES = {
    1: ReleaseOutcome.REQUEUED,
    3: ReleaseOutcome.DEAD_LETTERED,
    2: ReleaseOutcome.DUPLICATE,
    0: ReleaseOutcome.STALE,
}


class Delivery(PlanningMarks):
    """Client of the delivery protocol on one Redis (or Redis Cluster) deployment."""

    # -- publisher side -------------------------------------------------------------------------

    def publish(
        self,
        schedule: PublishedSchedule,
        now_ms: int | None = None,
        digest: str = "",
        answer: str = "",
        mark: str = "",
    ) -> PublishOutcome:
        """Write the schedule atomically, then announce it to its workers and the reaper index.

        Idempotent per ``schedule_id``: replaying the same publish writes nothing (and re-announces,
        which repairs an announce lost to a crash); a different schedule under a used id, or the same
        one with a ``digest`` other than the stored one (other work), raises ``ScheduleConflictError``
        and changes nothing. Bad input raises ``InvalidInputError`` first.
        A drained worker (``PublishedSchedule.drained``) is not announced it: its sidecar, often still
        running, never polls it, and its claims and steals lease nothing in it anyway.
        ``digest`` (of the request's work, ``P:meta`` ``request``) and ``answer`` (the service's
        answer to it, ``P:answer``) are stored in the same atomic step when given, so a stored
        schedule always has them (``stored_request``); a replay leaves the first ones.
        ``mark``: the request's in-flight mark (``mark_planning``'s ``request_id``; '' for none), which
        must still be in ``P:planning``, else ``MarkLapsedError`` and nothing written: its trainer may
        have DELETEd the id meanwhile and been told 404 (``service/pipeline/in_flight.py``).
        """
        schedule.validate()
        args = wire.publish_args(schedule, now_ms, uuid.uuid4().hex, digest, answer, mark)
        announcing.list_ahead(self, schedule.schedule_id)  # a kill from here on leaves it listed
        created = self._call(self.scripts.publish, schedule.schedule_id, args)
        announced = sorted(set(schedule.queues) - schedule.drained)  # a drained worker is not told
        self._announce(schedule.schedule_id, announced, schedule.lease.retention_s)
        return PublishOutcome.CREATED if int(created) == 1 else PublishOutcome.UNCHANGED

    # -- worker side ----------------------------------------------------------------------------

    def _leases(self, schedule_id: str, worker_id: str, flat: Sequence[Any]) -> list[Lease]:
        return [
            Lease(
                schedule_id=schedule_id,
                worker_id=worker_id,
                item=DeliveryItem.from_json(json.loads(text(flat[i + 4]))),
                token=int(flat[i + 1]),
                deadline_ms=int(flat[i + 2]),
                attempt=int(flat[i + 3]),
            )
            for i in range(0, len(flat), 5)
        ]

    def claim(
        self,
        schedule_id: str,
        worker_id: str,
        max_items: int,
        now_ms: int | None = None,
        call_id: str | None = None,
    ) -> list[Lease]:
        """Lease up to ``max_items`` (capped at ``MAX_BATCH``) from the head of the worker's queue, then
        from the shared FIFO; ``[]`` when both are empty (then try ``steal``).

        Under prefix affinity a claim that takes a group's first sample from the shared FIFO binds
        the rest of that group to this worker in the same atomic step (they join its own queue, so
        one engine's prefix cache serves the whole group), and takes nothing more from the FIFO
        while any of them stay queued (``lua/claim.lua``).

        ``call_id`` (default: a fresh one) makes the call safe to re-send: redis-py re-sends a
        call whose reply timed out, and the same id again answers the first run's leases instead
        of leasing more, which would lapse unseen. A caller retrying after an error passes the id
        of the call that failed."""
        worker(worker_id)
        if max_items < 1:
            return []
        max_items = min(max_items, keyspace.MAX_BATCH)
        args = [worker_id, max_items, wire.clock(now_ms), call_id or uuid.uuid4().hex]
        flat = self._call(self.scripts.claim, schedule_id, args)
        return self._leases(schedule_id, worker_id, flat)

    def steal(
        self,
        schedule_id: str,
        worker_id: str,
        max_items: int,
        now_ms: int | None = None,
        budget_tokens: int | None = None,
        rate_tokens_per_s: float | None = None,
        busy_ms: int = 0,
        call_id: str | None = None,
    ) -> list[Lease]:
        """Lease items from the tail of the busiest queue; only when the worker's own queue is empty.

        Pinned items (and, under prefix affinity, groups that cannot move) are passed over for the
        nearest items before them, passing over at most 64: a pin shields nothing but itself. When that
        queue has nothing this worker may ever take there (pinned that far, its nearest item too big
        for its KV cache, no group that can move), the next busiest is tried, up to four per call; a
        refusal by the KV gate or the deadline guard below ends the steal at once (docs/delivery.md,
        "Several victims", "Pins and prefix affinity").
        Under prefix affinity a steal moves one whole group, never started, so a group stays on
        the engine whose cache holds its prefix; a worker that abandoned a group it ran (it runs
        nothing of the schedule, and the group's last leases there ended over a lease TTL ago: it
        died) gives up all of it still queued, started or partly done, so a step never waits on a
        dead worker's group (docs/delivery.md, "Leases, fencing tokens and expiry").

        Takes at most half of the victim's queue (at least one item) and at most ``max_items``, so
        the longest items, planned first, stay with their owner. ``budget_tokens`` is the KV steal
        gate: the thief's free KV tokens at predicted final lengths (its cache minus the reservations
        of everything it holds). Tail items are taken only while their cumulative
        ``reservation_tokens`` fit it; the first that does not stays queued and ends the steal. None
        means unbounded (a thief that does not know its KV cache is limited by slots alone).

        ``rate_tokens_per_s`` is the deadline guard: the thief's decode rate per sequence. An item
        with a planned deadline (``DeliveryItem.deadline_ms``) is taken only if now + its predicted
        tokens / rate is no later than that deadline, moved back by how late its owner runs; the
        first that fails stays queued and ends the steal; and only if that still holds were the item
        ``LENGTH_MARGIN`` times longer than predicted (``scheduler.stealguard.beats_owner``: a thief
        much slower than the owner loses on an under-predicted item). None: no guard (as before).
        ``busy_ms``: how long the work the thief already holds still takes; under the guard it must
        end by that deadline too, or the steal would only make the thief the last to finish.
        """
        worker(worker_id)
        if max_items < 1:
            return []
        max_items = min(max_items, keyspace.MAX_BATCH)
        call = call_id or uuid.uuid4().hex  # safe to re-send, as in ``claim``
        args = wire.steal_args(worker_id, max_items, now_ms, budget_tokens, rate_tokens_per_s, busy_ms, call)
        flat = self._call(self.scripts.steal, schedule_id, args)
        return self._leases(schedule_id, worker_id, flat[1:])

    def heartbeat(self, leases: Iterable[Lease], now_ms: int | None = None) -> list[Lease]:
        """Extend every lease still current; return those (with new deadlines).

        A lease missing from the answer is gone (expired, reaped or never valid): stop that work. So
        are the leases of a schedule whose keys are gone (its retention passed): one such schedule
        must not keep the leases of every other schedule from their heartbeat. Nor must one whose
        Redis Cluster slot or master does not answer now (``heartbeat_reaching``): its error is
        raised once the others are extended (an outage: nothing said of its leases)."""
        alive, reach = self.heartbeat_reaching(leases, now_ms)
        if reach.missing:
            raise next(iter(reach.missing.values()))
        return alive

    def heartbeat_reaching(
        self, leases: Iterable[Lease], now_ms: int | None = None, reach: Reach | None = None
    ) -> tuple[list[Lease], Reach]:
        """``heartbeat``'s extension, and the schedules it could not reach with why (``reach.py``): a
        caller refreshes what was extended and holds only those schedules' leases in outage. Raised at
        once, a slot's error left every schedule after it unextended, the reaper requeuing their
        leases as lapsed; and a caller that raised it had the others' new deadlines lost. ``reach``
        (the caller's) still tells what failed where the walk raises as an outage."""
        alive: list[Lease] = []
        reach = Reach(self.client, self.prefix) if reach is None else reach
        for (schedule_id, holder), group in by_holder(leases).items():
            if reach.passed_over(schedule_id):
                continue
            args: list[Any] = [wire.clock(now_ms), holder]
            for lease in group:
                args += [lease.key, lease.token]
            try:
                beat = partial(self._call, self.scripts.heartbeat, schedule_id, args)
                deadlines = self._settled(schedule_id, reach.sent(schedule_id, beat))
            except UnknownScheduleError:
                reach.got(schedule_id)
                continue
            except reach.catches as error:
                reach.missed(schedule_id, error)
                continue
            reach.got(schedule_id)
            alive += [
                _with_deadline(le, int(d)) for le, d in zip(group, deadlines, strict=True) if int(d) >= 0
            ]
        return alive, reach

    def complete(
        self, lease: Lease, result: TrajectoryResult, now_ms: int | None = None
    ) -> CompletionOutcome:
        """Report one finished item, as the worker that holds it; see ``complete_many``."""
        entries = [(lease.key, lease.token, result)]
        return self.complete_many(lease.schedule_id, entries, now_ms, lease.worker_id)[0]

    def complete_many(
        self,
        schedule_id: str,
        entries: Sequence[tuple[str, int, TrajectoryResult]],
        now_ms: int | None = None,
        worker_id: str | None = None,
    ) -> list[CompletionOutcome]:
        """Report finished items as (key, token, result); one outcome each, in order.

        ACCEPTED appends the result to the schedule's results stream; DUPLICATE (the same token was
        already accepted, e.g. a retry after a lost reply) is a success that writes nothing; STALE
        (the lease lapsed, was reaped or is unknown, or, with ``worker_id``, another worker holds
        it) discards the result. Sidecars pass their ``worker_id``: tokens count up per schedule.
        """
        if worker_id is not None:
            worker(worker_id)
        if not entries:
            return []
        args = wire.complete_args(entries, now_ms, worker_id)
        codes = self._call(self.scripts.complete, schedule_id, args)
        return self._outcomes(schedule_id, codes)

    def _outcomes(self, schedule_id: str, codes: Sequence[Any]) -> list[CompletionOutcome]:
        return [_COMPLETE_CODES[int(c)] for c in self._settled(schedule_id, codes)]

    def complete_and_claim(
        self,
        schedule_id: str,
        worker_id: str,
        entries: Sequence[tuple[str, int, TrajectoryResult]],
        max_items: int,
        now_ms: int | None = None,
        call_id: str | None = None,
    ) -> tuple[list[CompletionOutcome], list[Lease]]:
        """``complete_many`` then ``claim``, pipelined into ONE round trip (two atomic scripts).

        The steady state of a busy worker: report what finished and take as many new items. Each
        script stays atomic on its own; a NOSCRIPT answer (server restarted) reruns that script alone,
        and a failed-over master is followed as a sidecar's calls follow it (``ScriptCalls._pipelined``).
        The claim carries ``call_id`` (default: a fresh one) as ``claim`` does: redis-py re-sends a
        whole pipeline whose reply it lost, and the re-sent claim must answer the first run's leases
        rather than lease more that no one hears of.
        """
        want = min(max(max_items, 0), keyspace.MAX_BATCH)
        claim_args = [worker(worker_id), want, wire.clock(now_ms), call_id or uuid.uuid4().hex]
        calls = [(self.scripts.claim, claim_args)]
        if entries:
            calls.insert(0, (self.scripts.complete, wire.complete_args(entries, now_ms, worker_id)))
        replies = self._pipelined(schedule_id, calls)
        outcomes = self._outcomes(schedule_id, replies[0]) if entries else []
        return outcomes, self._leases(schedule_id, worker_id, replies[-1])

    def release(
        self, leases: Sequence[Lease], now_ms: int | None = None, died: str = ""
    ) -> list[ReleaseOutcome]:
        """Hand leases back without spending an attempt (graceful shutdown): head of the queue.

        ``died`` names what died running them (``its worker process``: a pull worker's ``/reset``;
        ``its engine``), so each item is refunded only its first ``RESET_REFUNDS`` times back so, as by
        ``reset``: an item that kills it at every run is dead-lettered after ``max_attempts``."""
        if died:
            return self._release("died", f"{keyspace.RESET_REFUNDS} {died}", leases, now_ms)
        return self._release("release", "", leases, now_ms)

    def fail(self, lease: Lease, reason: str, now_ms: int | None = None) -> ReleaseOutcome:
        """Report that the engine failed the item: dead-lettered after max attempts, else retried at
        the head of another live worker's queue when one may take it (``lua/release.lua``
        ``retry_target``), else at its holder's."""
        return self._release("fail", reason, [lease], now_ms)[0]

    def fail_key(
        self, schedule_id: str, worker_id: str, key: str, token: int, reason: str, now_ms: int | None = None
    ) -> ReleaseOutcome:
        """``fail`` by key and token alone, for a lease the caller holds no ``Lease`` of (a pull
        worker's report of its killed sidecar's lease): the token in Redis decides, as in ``fail``."""
        worker(worker_id)  # an empty holder would mean any holder to the script
        return self._release_keys("fail", reason, schedule_id, worker_id, [(key, token)], now_ms)[0]

    def _release(
        self, mode: str, reason: str, leases: Sequence[Lease], now_ms: int | None
    ) -> list[ReleaseOutcome]:
        outcome: dict[tuple[str, str, int], ReleaseOutcome] = {}
        for (schedule_id, holder), group in by_holder(leases).items():
            pairs = [(lease.key, lease.token) for lease in group]
            codes = self._release_keys(mode, reason, schedule_id, holder, pairs, now_ms)
            for (key, token), code in zip(pairs, codes, strict=True):
                outcome[(schedule_id, key, token)] = code
        return [outcome[(le.schedule_id, le.key, le.token)] for le in leases]

    def _release_keys(
        self,
        mode: str,
        reason: str,
        schedule_id: str,
        holder: str,
        pairs: Sequence[tuple[str, int]],
        now_ms: int | None,
    ) -> list[ReleaseOutcome]:
        """One ``lua/release.lua`` call for ``holder``'s (key, token) ``pairs``, answered in order."""
        args: list[Any] = [mode, wire.clock(now_ms), reason, holder]
        for key, token in pairs:
            args += [key, token]
        codes = self._settled(schedule_id, self._call(self.scripts.release, schedule_id, args))
        return [_RELEASE_CODES[int(code)] for code in codes]

    def reset(
        self,
        schedule_id: str,
        worker_id: str,
        age_ms: int,
        now_ms: int | None = None,
        call_id: str | None = None,
    ) -> ResetReport:
        """Hand back the leases ``worker_id`` holds from a process that ended (``lua/reset.lua``).

        For a push sidecar's start: what its predecessor held runs nowhere. Current leases go back to
        the head of the worker's queue without spending an attempt (as ``release``) the first
        ``RESET_REFUNDS`` times an item is handed back so; later hand-backs spend it, so an item whose
        run kills its sidecar is dead-lettered after ``max_attempts`` instead of looping. Lapsed ones are
        expired as the reaper would. ``age_ms`` is how long ago the caller's process started: a lease
        taken or extended since (deadline at least now - age + ttl) is a live process's, and is kept.

        ``call_id`` (default: a fresh one) makes the call safe to re-send, as ``claim``'s: a re-sent
        reset whose first run's reply was lost would find those leases gone and answer zeros, so
        the same id again answers the first run's counts and hands back nothing more. A caller
        retrying after an error passes the id of the call that failed.
        """
        call = call_id or uuid.uuid4().hex
        args = [wire.clock(now_ms), worker(worker_id), max(0, int(age_ms)), keyspace.RESET_REFUNDS, call]
        reply = self._settled(schedule_id, self._call(self.scripts.reset, schedule_id, args))
        released, lapsed, dead, charged = (int(n) for n in reply)
        return ResetReport(released, lapsed, dead, charged)

    # -- reaper, progress, results --------------------------------------------------------------

    def reap(self, schedule_id: str, now_ms: int | None = None, limit: int = 1000) -> ReapReport:
        """Expire up to ``limit`` lapsed leases of one schedule (atomic: safe from many replicas).

        The report's ``quiet_until_ms`` is when the next of its leases can lapse at the earliest
        (``lua/reap.lua``): ``reaper.reap_all`` passes the schedule over until then."""
        reply = self._call(self.scripts.reap, schedule_id, [wire.clock(now_ms), limit])
        requeued, dead, quiet, *holders = self._settled(schedule_id, reply)
        return ReapReport(int(requeued), int(dead), tuple(sorted(text(w) for w in holders)), int(quiet))

    def cancel(self, schedule_id: str, now_ms: int | None = None, withdraw_s: int = 0) -> CancelReport:
        """End every queued and running item of the schedule (the trainer gave up on the step).

        One atomic script (``lua/cancel.lua``): queued items leave the queues and running leases end,
        so a heartbeat reports them lost (the sidecar stops the request) and a late completion is
        STALE; accepted results stay readable. Then the schedule leaves the reapers' index and its
        workers' inboxes, so sidecars move on to the next schedule. Idempotent: a repeat answers the
        first cancel's report (and repairs a retire lost to a crash). An id not published but in
        flight (``mark_planning``) is, with ``withdraw_s``, withdrawn for as long, or for what its
        mark had left if longer: a request in line past a short retention is refused all the same
        (``keys.ScheduleKeys.withdrawn``; report ``withdrawn``, a repeat answers the same). Its
        publish is refused (``ScheduleWithdrawnError``), as its trainer gave the step up before it
        was out. ``UnknownScheduleError`` otherwise (never sent, or expired), and nothing is written.
        """
        withdraw = str(withdraw_s * 1000) if withdraw_s > 0 else ""
        reply = self._call(self.scripts.cancel, schedule_id, [wire.clock(now_ms), withdraw])
        queued, running, at_ms, withdrawn = (int(n) for n in reply)
        if not withdrawn:  # a withdrawn id was never announced: no index to retire it from
            self._retire(schedule_id)
        return CancelReport(queued, running, at_ms, withdrawn=withdrawn == 1)


def _with_deadline(lease: Lease, deadline_ms: int) -> Lease:
    return Lease(lease.schedule_id, lease.worker_id, lease.item, lease.token, deadline_ms, lease.attempt)

"""How a worker's session leases a schedule's items: its own queue's head first, then a steal, then,
idle, a reap of lapsed leases (``WorkerSession.claim`` walks the schedules and holds what this takes).

A steal takes from the busiest queue what fits the worker's free slots and its KV cache at predicted
lengths (the KV steal gate) and what it would finish, at the decode rate it measured, before the
item's planned owner would (the deadline guard; before its first completion it has no rate and
steals as if items had no deadline). The opportunistic reap means that redelivery of a dead
worker's items does not depend on the service's reaper being up. A claim or steal whose reply was
lost is sent again under its call id (``Delivery.claim``), so it gets back the leases it may have
taken instead of leaving them to lapse.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial

import redis

from service.delivery.errors import REDIS_FAILED, SLOT_NOT_SERVED, UnknownScheduleError
from service.delivery.outcomes import ReleaseOutcome
from service.delivery.progress import ScheduleInfo
from service.delivery.protocol import Delivery
from service.delivery.records import Lease
from service.delivery.remap import remapped
from service.delivery.stored import unreadable_field
from service.sidecar.holdings import Held, Holdings
from service.sidecar.session_settings import SessionSettings, SessionStats

log = logging.getLogger("service.sidecar")  # the session's logger: operators grep its lines there
# replies that say nothing about one schedule's keys: out of memory, a failover in progress, a refused
# transaction, a user without a needed command; the runner waits these out
NOT_THE_SCHEDULES: tuple[type[Exception], ...] = (
    redis.exceptions.OutOfMemoryError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.ExecAbortError,
    redis.exceptions.NoPermissionError,
    # a Redis Cluster's slot not served now: taken for a damaged schedule, it was logged as an error
    # and skipped (a takeover left a dead process's leases there to lapse, an attempt spent each)
    *SLOT_NOT_SERVED,
)


@dataclass
class Claims:
    """One worker's claims, steals and idle reaps, with what it keeps per schedule between them."""

    delivery: Delivery
    holdings: Holdings
    settings: SessionSettings
    stats: SessionStats  # the session's own: claimed, stolen and reaped are counted there
    # the session's count of a report refused (schedule, key, what): cancelled or stale
    refused: Callable[[str, str, str], Awaitable[None]]
    # the session's keep of a failure report Redis never answered, sent again (``Resends.keep``)
    keep: Callable[[Held], None]
    _last_reap: dict[str, float] = field(default_factory=dict, init=False)
    _damaged: set[str] = field(default_factory=set, init=False)  # schedules whose scripts fail (logged)
    # (schedule, "claim" | "steal") -> the id of a call that raised: it may have leased before the
    # reply was lost, so the next such call re-sends that id and gets those leases back
    _unanswered: dict[tuple[str, str], str] = field(default_factory=dict, init=False)

    def forget(self, schedule_id: str) -> None:
        """Drop what is kept for a schedule finished or expired: a long-lived sidecar must not
        accumulate them."""
        self._last_reap.pop(schedule_id, None)
        self._damaged.discard(schedule_id)
        self._unanswered.pop((schedule_id, "claim"), None)
        self._unanswered.pop((schedule_id, "steal"), None)

    async def take(self, info: ScheduleInfo, count: int) -> list[Lease]:
        """Up to ``count`` leases of ``info``'s schedule (``_take_once``), less any unreadable item
        (``_readable``): taken again when every lease taken was one, so the items behind such an
        item are served now, not on the next claim (each round fails one attempt of each, so the
        rounds end once they are dead-lettered)."""
        while True:
            leases = await self._take_once(info, count)
            readable = await self._readable(leases)
            if readable or not leases:
                return readable

    async def _take_once(self, info: ScheduleInfo, count: int) -> list[Lease]:
        """Up to ``count`` leases of ``info``'s schedule; none from a schedule whose scripts fail on
        its keys (logged once). ``UnknownScheduleError`` when the schedule is gone; a reply that says
        nothing about the schedule (``NOT_THE_SCHEDULES``) is raised, as every schedule would fail
        alike."""
        worker, sid = self.settings.worker_id, info.schedule_id
        try:
            leases = await self._once(sid, "claim", self.delivery.claim, sid, worker, count)
            self.stats.claimed += len(leases)
            if not leases and self.settings.steal:
                budget = self.holdings.steal_budget()  # the KV steal gate; None: slots alone
                rate = self.holdings.decode_rate()  # the deadline guard; None: no completion yet
                steal, busy = self.delivery.steal, self.holdings.busy_ms(rate)
                leases = await self._once(
                    sid,
                    "steal",
                    steal,
                    sid,
                    worker,
                    count,
                    budget_tokens=budget,
                    rate_tokens_per_s=rate,
                    busy_ms=busy,
                )
                self.stats.stolen += len(leases)
            if not leases and self.settings.reap_when_idle:
                await self._reap_idle(info)
        except UnknownScheduleError:
            raise
        except NOT_THE_SCHEDULES:
            raise
        except redis.ResponseError as error:  # a script failed on this schedule's keys (one evicted)
            if sid not in self._damaged:
                self._damaged.add(sid)
                log.error("schedule %s is damaged in Redis (%s); working on the others", sid, error)
            return []
        return leases

    async def _readable(self, leases: list[Lease]) -> list[Lease]:
        """``leases`` less those whose item holds text UTF-8 cannot carry (another writer's bytes,
        read back as lone surrogates; or a lone surrogate an older release stored JSON-escaped),
        each failed at once with a reason naming its key and field, so after its attempts it is
        dead-lettered with that reason. Held, it could never be served: a pull worker's
        ``GET /next`` of it failed to render (500) after the sidecar had handed it out, and the lease
        was renewed, unreported, until the sidecar stopped; a push sidecar failed it only once it
        could not encode the engine's request. Cut (the drain cancels a claim still running), the
        leases not held yet lapse, held by no one: counted ``lost``, as counted taken; the report cut
        is kept (``keep``) as one never answered, so the shutdown's last try (``Resends.settle``)
        counts it as Redis answers it (``failed``, or ``stale``), ``lost`` only if it still does not.
        The cut counted it ``lost`` with the others, where it may have landed (helper sidecar47)."""
        readable = []
        for i, lease in enumerate(leases):
            field = unreadable_field(lease.item.to_json())
            if field is None:
                readable.append(lease)
                continue
            reason = f"stored item {lease.key!r} is not UTF-8 in field {field}: it cannot be sent"
            try:
                await self._fail_unreadable(lease, reason)
            except BaseException:  # its count comes after its last await: none yet
                self.keep(Held(lease, 0, failure=reason))
                self.stats.lost += len(leases) - i - 1 + len(readable)
                raise
        return readable

    async def _fail_unreadable(self, lease: Lease, reason: str) -> None:
        """Report ``lease`` failed with ``reason``. A report Redis does not answer is kept and sent
        again at the next heartbeats (``keep``: ``resends.py``, as a push failure report whose lease
        was forgotten), not raised: raised, it took the claim's readable leases with it, held by no
        one until they lapsed too (an attempt spent each, a TTL late).

        The lease was counted taken (``claimed`` or ``stolen``), so it is counted ended once:
        ``failed`` when the report was taken (or its resend answered DUPLICATE: it had landed),
        cancelled or stale when it was refused (a resend too: the lease lapsed first), stale when its
        schedule is gone; ``lost`` only where a kept report is (unanswered at the drain, or given up).
        It counted ``lost`` at once when unanswered, where the report may have landed (round 45)."""
        try:
            meta, send = (
                self.delivery.keys(lease.schedule_id).meta,
                partial(self.delivery.fail, lease, reason),
            )
            outcome = await asyncio.to_thread(remapped, self.delivery.client, meta, send)
        except UnknownScheduleError:  # its keys went since the claim: ``stale``, as ``WorkerSession.fail``
            self.stats.stale += 1  # counts it; raised, it took the claim's readable leases, uncounted
            log.warning("schedule %s is gone from Redis; %s not failed", lease.schedule_id, lease.key)
            return
        except REDIS_FAILED as error:
            self.keep(Held(lease, 0, failure=reason))
            log.warning(
                "schedule %s: %s; not answered (%s): sent again at the next heartbeat",
                lease.schedule_id,
                reason,
                error,
            )
            return
        if outcome is ReleaseOutcome.STALE:  # cancelled between the claim and the report
            await self.refused(lease.schedule_id, lease.key, "failure report of an unreadable item")
            return
        self.stats.failed += 1
        log.error("schedule %s: %s; failed", lease.schedule_id, reason)

    async def _once(
        self, sid: str, kind: str, fn: Callable[..., list[Lease]], *args: object, **kwargs: object
    ) -> list[Lease]:
        """``fn`` (a claim or steal) under a call id kept until it answers, so the call after one
        that raised (its reply lost to a timeout or outage, maybe after it leased) re-sends that
        id and gets those leases back instead of leaving them to lapse (``Delivery.claim``)."""
        call = self._unanswered.setdefault((sid, kind), uuid.uuid4().hex)
        send = partial(fn, *args, call_id=call, **kwargs)  # a failover just now: sent to the new master
        leases = await asyncio.to_thread(remapped, self.delivery.client, self.delivery.keys(sid).meta, send)
        del self._unanswered[(sid, kind)]
        return leases

    async def _reap_idle(self, info: ScheduleInfo) -> None:
        now = time.monotonic()
        if now - self._last_reap.get(info.schedule_id, 0.0) < info.lease_ttl_ms / 2000:
            return
        self._last_reap[info.schedule_id] = now
        report = await asyncio.to_thread(self.delivery.reap, info.schedule_id)
        self.stats.reaped += report.requeued + report.dead_lettered

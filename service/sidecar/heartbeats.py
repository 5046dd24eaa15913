"""A worker's heartbeats: every held lease extended each third of the shortest lease TTL held.

A unit apart from the session's discovery, claims and reports because it answers a question of its
own: how often must this worker beat, and what does one beat tell it? The interval is re-read
whenever a claim leases more (a schedule of shorter leases may have joined); a beat that reaches no
schedule is an outage (one warning, the leases keep their deadlines); one that reaches some, others'
Redis Cluster slots or masters not answering, keeps only those schedules' leases unheard of
(``reach.py``, ``unreached.py``), and walks them last next time, so that a master down does not hold
every other lease's extension back by its client's retries. A lease the server no longer honours is
forgotten and returned lost (counted by the ledger, ``cancelled`` where the trainer cancelled it); one
whose report went unanswered is asked how it ended first: that report may have taken it. Redis
answering, the kept push completions are sent again (``resends.py``).

It lived in ``session.py`` until that module reached the 400-line limit (helper split64); the session
still answers ``heartbeat``, ``heartbeat_interval``, ``until_heartbeat_due`` and
``heartbeats_failing`` for the runner and the pull API, through this unit.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from service.delivery.progress import ScheduleInfo
from service.delivery.protocol import Delivery
from service.delivery.reach import Reach
from service.delivery.records import Lease
from service.sidecar.holdings import Held, Holdings, LeaseId, lease_id
from service.sidecar.ledger import Ledger
from service.sidecar.outage_retry import TRANSIENT
from service.sidecar.resends import Resends
from service.sidecar.session_settings import SessionSettings, heartbeat_every_s
from service.sidecar.unreached import Unreached
from service.sidecar.waits import sleep_unless

log = logging.getLogger("service.sidecar")  # the session's logger: operators grep its lines there


@dataclass
class Heartbeats:
    """One session's heartbeats: its interval, its wait, its beats and whether the last one failed.

    ``infos`` is the session's own dict of the schedules it knows (read, not written, here);
    ``forget_ended`` and ``refused_again`` are the session's, which its reports and hand-backs share."""

    delivery: Delivery
    holdings: Holdings
    settings: SessionSettings
    infos: dict[str, ScheduleInfo]
    ledger: Ledger
    resends: Resends
    forget_ended: Callable[[Held], None]
    refused_again: Callable[[Held], Awaitable[bool]]
    failing: bool = field(default=False, init=False)  # the outage is logged once
    leased: asyncio.Event = field(default_factory=asyncio.Event, init=False)  # set as a claim leases
    _warned: set[str] = field(default_factory=set, init=False)  # configuration warnings logged once
    _unreached: Unreached = field(default_factory=lambda: Unreached("heartbeats"), init=False)
    _failed_beat: set[str] = field(default_factory=set, init=False)  # schedules missed by a beat's outage

    def interval(self) -> float:
        """Seconds between heartbeats: a third of the shortest lease TTL held (or known), or the
        configured interval while it is shorter than that TTL (``heartbeat_every_s``)."""
        held = self.holdings.schedules() or set(self.infos)
        ttls = [self.infos[s].lease_ttl_ms for s in held if s in self.infos]
        every_s, warning = heartbeat_every_s(self.settings.heartbeat_interval_s, ttls)
        if warning is not None and warning not in self._warned:  # once per TTL, not once per beat
            self._warned.add(warning)
            log.warning(warning)
        return every_s

    async def until_due(self, since: float, interval: Callable[[], float]) -> None:
        """Sleep until ``interval()`` has passed since ``since`` (monotonic seconds), re-read whenever a
        claim leases more (``WorkerSession.until_heartbeat_due`` says why). ``interval`` is the
        session's ``heartbeat_interval``, looked up there at each call: the supervision tests replace
        it on the session to make the heartbeat loop die of a bug."""
        while (left := since + interval() - time.monotonic()) > 0:
            self.leased.clear()
            await sleep_unless(self.leased, left)

    async def beat(self) -> list[Held]:
        """Extend every held lease; return the holdings whose lease is gone (now forgotten). Then, Redis
        answering, send again the push completions it never answered (``resends.py``)."""
        leases = self.holdings.leases()
        if not leases:
            await self.resends.kept(probe=True)  # its answer, or none, tells whether Redis answers
            return []
        # those not reached last time go last: a master down costs its client's retries (~4 s), and
        # first in the walk they held every other lease's extension back by as much, at each beat
        unheard = self._unreached.now = self._unreached.now & {le.schedule_id for le in leases}
        last = unheard | self._failed_beat
        leases = sorted(leases, key=lambda lease: lease.schedule_id in last)
        reach = Reach(self.delivery.client, self.delivery.prefix, learns=True)  # walked in a thread
        try:
            alive, reach = await asyncio.to_thread(self.delivery.heartbeat_reaching, leases, None, reach)
            if (outage := reach.outage()) is not None:
                raise outage
        except TRANSIENT as exc:
            # walked last next time: first again, two masters failing (reach.py: slots count for their
            # master) ended every beat there (an outage), and the leases served after them lapsed
            self._failed_beat = set(reach.missing)
            if not self.failing:  # once per outage: heartbeats run every ttl/3 seconds
                log.warning("heartbeat failed, leases keep their deadlines: %s", exc)
            self.failing = True
            self.resends.unreachable()  # kept results do not age through an outage
            return []
        self._failed_beat = set()
        unreached = set(reach.missing)  # only their leases are in outage: kept, their deadlines too
        self._unreached.tell(reach)
        self.resends.answered({lease.schedule_id for lease in leases} - unreached)
        self.resends.unreachable(unreached)
        if self.failing:
            log.info("heartbeats go through again")
        self.failing = False
        self.holdings.refresh(alive)
        return await self._ended(leases, {lease_id(a) for a in alive}, unreached)

    async def _ended(self, leases: list[Lease], kept: set[LeaseId], unreached: set[str]) -> list[Held]:
        """The beat's leases found gone: forgotten and counted lost (or cancelled), and those whose
        report went unanswered asked how they ended; then the kept completions sent again."""
        lost: list[Held] = []
        sent: list[Held] = []  # a completion unanswered: it may be what took the lease
        for lease in leases:
            held = self.holdings.get(lease_id(lease))
            if held is None or held.completing or lease_id(lease) in kept or lease.schedule_id in unreached:
                continue  # finished meanwhile, being reported (the report decides), alive, or unheard of
            if held.unanswered is not None or held.failure:
                sent.append(held)
            else:
                self.forget_ended(held)
                lost.append(held)
        by_schedule: dict[str, list[str]] = {}
        for held in lost:
            by_schedule.setdefault(held.lease.schedule_id, []).append(held.lease.key)
        await self.ledger.gone_each(by_schedule)
        # a pull lease found gone whose completion or failure report went unanswered: it may have taken it
        refused = [h for h in sent if await self.refused_again(h)]
        await self.resends.kept()
        return lost + refused

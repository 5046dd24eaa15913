"""Handing leases back without spending an attempt: the one way a worker's leases end unfinished.

A unit apart from the session's claims, heartbeats and reports because it answers a question of its
own: when a worker gives up items it has not finished (shutdown, a pull worker's ``/reset``, the
watchdog's refund of what died running), how does each lease still end exactly once, counted once,
whatever Redis says (requeued, dead-lettered, already gone) or does not say (an outage, a shutdown's
bound cut short)? Schedule by schedule, so that one schedule gone from Redis does not keep the
others' leases from going back; bounded by the pod's grace period (``hand_back``, ``hurry.py``), past
which the leases are left to lapse and the reaper requeues them.

A release goes through ``remap.remapped``, as the session's claims and reports do: at a drain right
after its schedule's master failed over, the client's own read of the map is paced to a second, and
every try of the release went to the old master until then (a drain's bound is seconds). A release
whose answer was lost (its master killed after running it, the write replicated) and sent again is
answered ``DUPLICATE`` (``lua/release.lua``'s ``P:released``), counted ``released``: it was ``STALE``,
counted ``lost`` beside a lease that had gone back (cluster54).

A release another task has under way (the engine watch's at a stall, the hang bound's, an item's
task's) is waited for at the drain's end (``settled``), within its time: the drain skips the leases
it took, and the loops were then cancelled, that release with them, its leases counted ``lost`` and
left leased until they lapsed, handed back by nobody (exit55).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar

from service.delivery.errors import UnknownScheduleError
from service.delivery.outcomes import ReleaseOutcome
from service.delivery.protocol import Delivery
from service.delivery.remap import remapped
from service.sidecar.holdings import Held, Holdings, lease_id
from service.sidecar.hurry import Hurry
from service.sidecar.ledger import Ledger
from service.sidecar.outage_retry import OutageRetry
from service.sidecar.session_settings import SessionStats

log = logging.getLogger("service.sidecar")  # the session's logger: operators grep its lines there
RELEASE_GRACE_S = 2.0  # past the drain timeout, for releasing what did not finish (one round trip)
T = TypeVar("T")


def say_handed_back(helds: list[Held], what: str) -> None:
    """One INFO line for a shutdown's hand-back of ``helds`` (``what``: ``unstarted``), before it is
    sent: how many and of which schedules, so that a user reading the log after a stop sees where
    their items went. A stop while a claim's reply was in flight handed its leases back unstarted and
    said nothing, the log ending at "engine ready" (docs/experiments.md, round 59's second-SIGTERM
    test); one Redis does not take is a warning after it (``HandBacks.hand_back``)."""
    live = [held for held in helds if not held.ended]
    if live:
        leases = f"{len(live)} {what} lease{'s' if len(live) > 1 else ''}"
        schedules = ", ".join(sorted({held.lease.schedule_id for held in live}))
        log.info("stopping: handing back %s to their queues (schedule %s)", leases, schedules)


@dataclass
class HandBacks:
    """The release path of one ``WorkerSession``: its Redis client, holdings, counters and reports."""

    delivery: Delivery
    holdings: Holdings
    stats: SessionStats
    reports: OutageRetry  # the session's: one outage warning for completions, failures and releases
    ledger: Ledger
    _under_way: set[asyncio.Future[None]] = field(default_factory=set, init=False)  # ``release``s running

    async def settled(self) -> None:
        """Wait until no release is under way: those other tasks started (the engine watch's, the hang
        bound's), which the shutdown would cancel with its loops, their leases then counted ``lost`` and
        left to lapse though Redis was taking them. The caller bounds the wait (``runner``)."""
        while self._under_way:
            await asyncio.wait(list(self._under_way))

    async def release(self, helds: list[Held], died: str = "") -> int:
        """``_release``, known to be under way until it ends (``settled``)."""
        under_way = asyncio.get_running_loop().create_future()
        self._under_way.add(under_way)
        try:
            return await self._release(helds, died)
        finally:
            self._under_way.discard(under_way)
            under_way.set_result(None)

    async def _release(self, helds: list[Held], died: str) -> int:
        """Hand leases back without spending an attempt (shutdown): to the head of the queue; ``died``:
        who died running them (refunded once per item); how many that dead-lettered (``failed``).

        Schedule by schedule: one whose keys are gone (retention passed) has nothing to take back
        (its leases counted ``lost``, as a heartbeat counts them), and must not keep the others'
        leases from going back. One forgotten as ended is not sent, nor one no longer held: another
        hand-back took it since its caller read the holdings, and counts it (``hand_back`` runs this a
        turn of the loop after its call, so two that overlap, the engine watch's and the drain's, both
        listed it, and the second's refused release counted it ``lost`` beside ``released``). Those
        Redis does not answer (a shutdown's bound cut it) lapse: they end here, counted ``lost``."""
        by_schedule: dict[str, list[Held]] = {}
        for held in (h for h in helds if not h.ended):
            if self.holdings.remove(lease_id(held.lease)) is not held:
                continue  # handed back (or ended) by another since it was listed: counted there
            by_schedule.setdefault(held.lease.schedule_id, []).append(held)
        dead, groups = 0, list(by_schedule.items())
        for i, (schedule_id, group) in enumerate(groups):
            try:
                dead += await self._release_group(schedule_id, group, died)
            except BaseException:  # unanswered or cut: the groups after it were not sent, counted nowhere
                self.stats.lost += sum(len(rest) for _, rest in groups[i + 1 :])
                raise
        return dead

    async def _release_group(self, schedule_id: str, group: list[Held], died: str) -> int:
        """``release`` of one schedule's leases, each counted as it ends (unanswered or cut: ``lost``);
        how many that dead-lettered."""
        try:
            send = partial(self.delivery.release, [h.lease for h in group], died=died)
            outcomes = await self.reports.call("release", self._remapped, schedule_id, send)
        except UnknownScheduleError:  # gone as a heartbeat finds them: ``lost``, counted once here
            log.info("schedule %s is gone; its %d leases need no release", schedule_id, len(group))
            await self.ledger.gone(schedule_id, [h.lease.key for h in group])
            return 0
        except BaseException:  # unanswered: counted nowhere, claimed > ended
            self.stats.lost += len(group)
            raise
        dead = outcomes.count(ReleaseOutcome.DEAD_LETTERED)
        self.stats.failed += dead
        # a repeat of a release that landed (its answer lost) is its one end, as a completion's is
        self.stats.released += outcomes.count(ReleaseOutcome.REQUEUED) + outcomes.count(
            ReleaseOutcome.DUPLICATE
        )
        # gone before the hand-back (cancelled, or lapsed): each still ends once here; it ended
        # uncounted, and claimed ran ahead of what ended (a pull /reset after a DAPO cancel)
        gone = [
            h.lease.key for h, outcome in zip(group, outcomes, strict=True) if outcome is ReleaseOutcome.STALE
        ]
        if gone:
            await self.ledger.gone(schedule_id, gone)
        return dead

    def _remapped(self, schedule_id: str, send: Callable[[], T]) -> T:
        """``send()``, a release of ``schedule_id``'s leases, sent once more to its slot's new master
        where its master did not answer and has just been failed over (``remap.remapped``, as the
        reports' ``LeaseReports._remapped``). Blocking: ``OutageRetry.call`` runs it on a thread."""
        return remapped(self.delivery.client, self.delivery.keys(schedule_id).meta, send)

    async def hand_back(
        self, helds: list[Held], within_s: float, died: str = "", hurry: Hurry | None = None
    ) -> None:
        """``release`` (``died`` as there) if Redis takes it within ``within_s``, else leave the leases
        to lapse (the reaper requeues them): a shutdown must keep to the pod's grace period, Redis
        down included; and after a second signal (``hurry``, also one that comes while it waits) to
        that signal's grace (``hurry.py``)."""
        bound = hurry or Hurry(grace_s=within_s)  # unhurried: ``within_s`` alone
        try:
            await bound.bound(self.release(helds, died), time.monotonic() + within_s)
        except Exception as exc:  # Redis gone (or slow) at shutdown
            log.warning("could not release %d leases (%r); they lapse and are requeued", len(helds), exc)

"""One worker's side of the delivery protocol: find work, hold leases, keep them alive, report results.

Both sidecar modes share it: the push runner (which sends items to the engine itself) and the local
pull API (where the worker process drives its engine). It wraps the synchronous ``Delivery`` client in
worker threads so an asyncio program never blocks on Redis, and adds what a long-lived worker needs:

* discovery: the schedules announced to this worker (its inbox), oldest first;
* claiming: the head of its own queue first; when that is empty, stealing from the busiest queue
  within the KV steal gate and the deadline guard; when both are empty, an opportunistic reap of
  lapsed leases (``claims.py``);
* heartbeats: every held lease is extended each third of the shortest lease TTL among the held
  schedules; a lease the server no longer honours is reported lost so the caller stops that trajectory
  (one whose completion went unanswered is asked how it ended: that completion may have taken it):
  ``heartbeats.py``;
* cancelled schedules: a lease lost, or a completion or failure report refused, because the trainer
  cancelled the step is expected, not a fault: it is counted apart (``cancelled``, not ``lost`` or
  ``stale``) and told once per schedule at INFO, so that a cancel of a step with hundreds of items
  in flight does not bury the warnings about leases that really lapsed;
* completion with retries on connection errors: a completion whose reply was lost is sent again and
  answered DUPLICATE (a success), never accepted twice (``outage_retry.py``: one warning an outage);
  one still unanswered past the retry window is kept and sent again later, so its lease ends as what
  it was (``resends.py``), and so is a failure report (``release.lua`` answers its repeat DUPLICATE):
  both reports, and how each lease is counted by its answer, are ``lease_reports.py``'s;
* hand-backs: releasing unfinished leases at shutdown or reset, each ending once (``hand_backs.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ParamSpec, TypeVar

from service.delivery.errors import REDIS_FAILED, UnknownScheduleError
from service.delivery.outcomes import CompletionOutcome, ReleaseOutcome
from service.delivery.progress import ScheduleInfo
from service.delivery.protocol import Delivery
from service.delivery.reach import Reach
from service.delivery.records import Lease, TrajectoryResult
from service.logs import schedule_context
from service.sidecar.answering import where_of
from service.sidecar.cancels import Cancels
from service.sidecar.claims import Claims
from service.sidecar.hand_backs import RELEASE_GRACE_S as RELEASE_GRACE_S  # the runner, launch read it here
from service.sidecar.hand_backs import HandBacks
from service.sidecar.heartbeats import Heartbeats
from service.sidecar.holdings import Held, Holdings, lease_id
from service.sidecar.hurry import Hurry
from service.sidecar.inbox import Inbox, known_order
from service.sidecar.lease_reports import LeaseReports
from service.sidecar.ledger import Ledger
from service.sidecar.outage_retry import OutageRetry
from service.sidecar.report_turns import ReportTurns
from service.sidecar.resends import Resends

# re-exported (``X as X``): the runner, the pull API, the metrics and the tests import them from here
from service.sidecar.session_settings import SessionSettings as SessionSettings
from service.sidecar.session_settings import SessionStats as SessionStats
from service.sidecar.unreached import Unreached, missed

log = logging.getLogger("service.sidecar")
P = ParamSpec("P")
T = TypeVar("T")


@dataclass
class WorkerSession:
    """Async facade over ``Delivery`` for one worker; not shared between workers."""

    delivery: Delivery
    holdings: Holdings
    settings: SessionSettings
    stats: SessionStats = field(default_factory=SessionStats)
    _infos: dict[str, ScheduleInfo] = field(default_factory=dict, init=False)
    _inbox: Inbox = field(default_factory=Inbox, init=False)  # its reads; the known walked without it
    # schedules a claim or a heartbeat could not reach while others answered (each told once)
    _unreached_claims: Unreached = field(default_factory=lambda: Unreached("claims"), init=False)
    _failed_claims: set[str] = field(default_factory=set, init=False)  # missed by claims, since answered
    # schedules found cancelled (told once), and the items of each counted ``cancelled`` (once each)
    _cancelled: Cancels = field(default_factory=Cancels, init=False)
    _gone: set[str] = field(default_factory=set, init=False)  # held, found cancelled (``schedules``)
    _claims: Claims = field(init=False)  # claims, steals, idle reaps and what each keeps per schedule
    _reports: OutageRetry = field(init=False)  # completions, failures, releases: through outages
    _ledger: Ledger = field(init=False)  # which counter each lease's one end goes to
    turns: ReportTurns = field(default_factory=ReportTurns, init=False)  # a lease's reports, one at a time
    resends: Resends = field(init=False)  # completions Redis never answered, sent again
    _hand_backs: HandBacks = field(init=False)  # releases: how unfinished leases end (``hand_backs.py``)
    _lease_reports: LeaseReports = field(init=False)  # completions and failures (``lease_reports.py``)
    _heartbeats: Heartbeats = field(init=False)  # the beats, their interval and outage (``heartbeats.py``)

    def __post_init__(self) -> None:
        self._reports = OutageRetry(self.settings.retry_for_s)
        self._ledger = Ledger(self.stats, self._cancelled, self.found_cancelled)
        ttl_s = lambda sid: self._infos[sid].lease_ttl_ms / 1000 if sid in self._infos else None  # noqa: E731
        where = where_of(self.delivery)  # a cluster's slot: a kept result ages only as its own answers
        self.resends = Resends(self.turns, self.complete, self.fail, self.stats, ttl_s, where=where)
        refused, keep = self._ledger.refused, self.resends.keep
        self._claims = Claims(self.delivery, self.holdings, self.settings, self.stats, refused, keep)
        self._hand_backs = HandBacks(self.delivery, self.holdings, self.stats, self._reports, self._ledger)
        self._lease_reports = LeaseReports(
            self.delivery, self.holdings, self.settings, self.stats, self._reports, self._ledger, self.resends
        )
        self._heartbeats = Heartbeats(
            self.delivery,
            self.holdings,
            self.settings,
            self._infos,
            self._ledger,
            self.resends,
            self._forget_ended,
            self.refused_again,
        )

    async def _redis(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def schedules(self, reach: Reach | None = None) -> list[ScheduleInfo]:
        """The live schedules announced to this worker, oldest first (those claims missed since they
        last answered, last); less those whose settings could not be read for their Redis Cluster slot
        or master not answering (``reach``'s missing: ``claim`` goes on with the others; raised when none
        answered and no ``reach`` is given). Where the inbox did not answer, those known (``inbox.py``)."""
        walk = Reach(self.delivery.client, self.delivery.prefix) if reach is None else reach
        if (ids := await self._inbox.read(self.delivery, self.settings.worker_id, walk, self._infos)) is None:
            return known_order(self._infos, self._failed_claims)  # oldest first, as the inbox has them
        self._gone &= self.holdings.schedules()  # bounded by what is held (a pull sidecar never asks)
        for held in self.holdings.schedules() - set(ids):  # a cancel takes it off the inbox at once
            if await self.found_cancelled(held):
                self._gone.add(held)
        for gone in set(self._infos) - set(ids) - self.holdings.schedules():
            del self._infos[gone]  # finished or expired: a long-lived sidecar must not accumulate them
            self._claims.forget(gone)
        self._unreached_claims.now &= set(ids)  # bounded by the inbox, as ``_infos``
        self._failed_claims &= set(ids)
        infos = []
        for sid in sorted(ids, key=lambda sid: sid in self._failed_claims):  # ``claim``: last
            if sid not in self._infos:
                if walk.passed_over(sid):
                    continue
                try:
                    self._infos[sid] = await self._redis(self.delivery.info, sid)
                except UnknownScheduleError:
                    continue
                except walk.catches as error:  # read again at the next claim
                    await missed(walk, sid, error)
                    continue
                walk.got(sid)  # its slot answered: two failed after it are no outage
            infos.append(self._infos[sid])
        if reach is None and (outage := walk.outage()) is not None:
            raise outage
        return infos

    async def claim(self, want: int) -> list[Held]:
        """Lease up to ``want`` new items and hold them. From a schedule under KV admission (a KV
        capacity known) only one, and the claim ends there: ``Sidecar._fill`` claims again only once
        nothing waits, so each such item is admitted on the cache before the next is leased.

        A schedule whose Redis Cluster slot or master does not answer now is passed over, and claimed
        from at the next claim (a lost reply's call id kept: ``claims.py``); the others are claimed from
        (``reach.py``). Its error is raised only when no schedule answered: the runner's outage.
        Raised at the first such schedule, the claim leased nothing while the younger ones waited."""
        reach = Reach(self.delivery.client, self.delivery.prefix)
        try:
            return await self._claim_reaching(want, reach)
        finally:  # walked last next time: first, two failing ended every claim there (an outage)
            self._failed_claims = (self._failed_claims - reach.answered) | set(reach.missing)

    async def _claim_reaching(self, want: int, reach: Reach) -> list[Held]:
        got: list[Held] = []
        for info in await self.schedules(reach):
            if reach.passed_over(info.schedule_id):
                continue
            kv = info.kv_admission and self.holdings.kv_capacity_tokens is not None
            count = 1 if kv else want - len(got)
            try:
                leases = await self._take(info, count)
            except reach.catches as error:
                await missed(reach, info.schedule_id, error)
                continue
            reach.got(info.schedule_id)
            got += [self.holdings.add(lease, info.kv_admission) for lease in leases]
            if len(got) >= want or (kv and got):
                break
        if got:  # a schedule of a shorter TTL may be among them: the heartbeat's wait is re-read
            self._heartbeats.leased.set()
        if (outage := reach.outage()) is not None:
            raise outage
        self._unreached_claims.tell(reach)
        return got

    async def _take(self, info: ScheduleInfo, count: int) -> list[Lease]:
        try:
            return await self._claims.take(info, count)
        except UnknownScheduleError:  # forgotten whole here: no inbox read sees it known again
            self._infos.pop(info.schedule_id, None)
            self._claims.forget(info.schedule_id)
            return []

    def heartbeat_interval(self) -> float:
        """Seconds between heartbeats: a third of the shortest lease TTL held (or known), or the
        configured interval while it is shorter than that TTL (``heartbeats.py``)."""
        return self._heartbeats.interval()

    async def until_heartbeat_due(self, since: float) -> None:
        """Sleep until ``heartbeat_interval`` has passed since ``since`` (monotonic seconds), re-read
        whenever a claim leases more. Read once before the sleep, it was the interval of what was held
        or known then: a sidecar idle on a schedule of 60 s leases slept 20 s, and the 3 s leases of a
        schedule it claimed meanwhile lapsed long before that beat (reaped, run again elsewhere).

        ``sleep_unless``, not ``wait_for`` (``service/sidecar/waits.py``): with it this loop slept on
        after a cancel that met a claim's wake-up, and a shutdown that cancelled the heartbeat just
        after a claim leased waited for it for ever (the pull app's lifespan)."""
        await self._heartbeats.until_due(since, self.heartbeat_interval)

    @property
    def heartbeats_failing(self) -> bool:
        """Whether the last heartbeat failed on Redis (the leases keep their deadlines meanwhile): reached
        no schedule. One that reached some, others' Redis Cluster slots or masters not answering, is
        no outage of the session: only those schedules' leases are kept unheard of (``reach.py``)."""
        return self._heartbeats.failing

    async def heartbeat(self) -> list[Held]:
        """Extend every held lease; return the holdings whose lease is gone (now forgotten). Then, Redis
        answering, send again the push completions it never answered (``heartbeats.py``)."""
        return await self._heartbeats.beat()

    async def refused_again(self, held: Held) -> bool:
        """Pull: the unanswered report of a lease held (found gone, or before a hand-back), sent once
        more (``resends.py``): whether Redis refused it (the lease lapsed first: listed lost), once: a
        ``failing`` lease was (a refused completion whose failure's resend went unanswered, listed at
        every beat until one was answered)."""
        told = held.failing
        if held.unanswered is not None:
            refused = await self.resends.again(held, self.holdings) is CompletionOutcome.STALE
        else:
            refused = await self.resends.fail_again(held, self.holdings) is ReleaseOutcome.STALE
        return refused and not told

    def _forget_ended(self, held: Held) -> None:
        """Forget a lease that ended here unreported, counted by the caller (``lost``, ``cancelled``). Its
        item's task may still report it (the heartbeat asks Redis about a cancel before the runner stops
        it): ``complete``, ``fail`` and ``release`` then send nothing, or the refusal counted it twice."""
        held.ended = True
        self.holdings.remove(lease_id(held.lease))

    def is_cancelled(self, schedule_id: str) -> bool:
        """Whether this session found ``schedule_id`` cancelled by the trainer (``found_cancelled``):
        what a caller reads to stop a lost lease without a warning."""
        return schedule_id in self._cancelled

    async def found_cancelled(self, schedule_id: str) -> bool:
        """Whether a lease of ``schedule_id`` ended because the trainer cancelled the schedule.

        Asked only once the server refused a lease, so a healthy run costs nothing; one HEXISTS per
        schedule, as a cancel is final (a schedule found not cancelled is asked again next time). The
        first time, one INFO line says so for all of the schedule's items. Redis failing the check
        counts as not cancelled: a warning too many beats a real loss hidden."""
        if schedule_id in self._cancelled:
            return True
        try:
            cancelled = await self._redis(self.delivery.cancelled, schedule_id)
        except REDIS_FAILED:
            return False
        if cancelled and self._cancelled.add(schedule_id):  # another check may have won the race
            with schedule_context(schedule_id):  # also when a heartbeat, outside any item, found it
                log.info("schedule %s cancelled by the trainer: dropping its results", schedule_id)
        return cancelled

    def cancelled_held(self) -> set[str]:
        """The schedules with leases held here that ``schedules`` found cancelled since last asked: the
        runner stops their requests then. Without it, a cancel that no completion ran into (only
        long items running, DAPO's tail) was found at the next heartbeat, a third of the lease TTL
        later, the engine decoding for nobody meanwhile; a sidecar with free slots reads its
        schedules every idle poll."""
        gone, self._gone = self._gone, set()
        return gone

    def drop_cancelled(self, schedule_id: str) -> list[Held]:
        """Forget every lease of a schedule found cancelled that is not being completed, counted
        ``cancelled``; the caller stops those trajectories now rather than at the next heartbeat,
        which would only find the same leases gone up to a third of a lease TTL later."""
        dropped = [h for h in self.holdings.all() if h.lease.schedule_id == schedule_id and not h.completing]
        for held in dropped:
            self._forget_ended(held)
        self._ledger.cancelled(schedule_id, [held.lease.key for held in dropped])
        return dropped

    async def complete(
        self, held: Held, result: TrajectoryResult, keep_unanswered: bool = False, once: bool = False
    ) -> CompletionOutcome:
        """``complete_held``'s completion answer."""
        outcome, _ = await self.complete_held(held, result, keep_unanswered, once)
        return outcome

    async def complete_held(
        self, held: Held, result: TrajectoryResult, keep_unanswered: bool = False, once: bool = False
    ) -> tuple[CompletionOutcome, ReleaseOutcome | None]:
        """Report a finished item (retried through outages) and forget it; its lease's end as
        Redis answered, and the failure report's where one was sent first (``lease_reports.py``)."""
        return await self._lease_reports.complete_held(held, result, keep_unanswered, once)

    async def complete_key(
        self,
        schedule_id: str,
        key: str,
        token: int,
        result: TrajectoryResult,
        held: bool = True,
        once: bool = False,
        failure_sent: bool = False,
    ) -> CompletionOutcome:
        """Report a finished item by its lease token, held here or not (``lease_reports.py``)."""
        reports = self._lease_reports
        return await reports.complete_key(schedule_id, key, token, result, held, once, failure_sent)

    async def fail(
        self, held: Held, reason: str, keep_unanswered: bool = False, once: bool = False
    ) -> ReleaseOutcome:
        """``fail_held``'s failure answer."""
        outcome, _ = await self.fail_held(held, reason, keep_unanswered, once)
        return outcome

    async def fail_held(
        self, held: Held, reason: str, keep_unanswered: bool = False, once: bool = False
    ) -> tuple[ReleaseOutcome, CompletionOutcome | None]:
        """Report that an item could not run: retried elsewhere or dead-lettered by attempts; its
        lease's end as Redis answered, and the result's where one was sent first (``lease_reports.py``)."""
        return await self._lease_reports.fail_held(held, reason, keep_unanswered, once)

    async def fail_key(self, schedule_id: str, key: str, token: int, reason: str) -> ReleaseOutcome:
        """Report a failure of a lease not held here, the token in Redis deciding (``lease_reports.py``)."""
        return await self._lease_reports.fail_key(schedule_id, key, token, reason)

    async def release(self, helds: list[Held], died: str = "") -> int:
        """Hand leases back without spending an attempt; how many that dead-lettered (``hand_backs.py``)."""
        return await self._hand_backs.release(helds, died)

    async def hand_backs_settled(self) -> None:
        """Until no release another task started is under way (``hand_backs.py``)."""
        await self._hand_backs.settled()

    async def hand_back(
        self, helds: list[Held], within_s: float, died: str = "", hurry: Hurry | None = None
    ) -> None:
        """``release`` within ``within_s`` (or a second signal's grace), else leave the leases to
        lapse: a shutdown keeps to the pod's grace period (``hand_backs.py``)."""
        await self._hand_backs.hand_back(helds, within_s, died, hurry)

"""A sidecar's start (push or pull mode): hand back at once what an earlier process of its worker id
still holds.

Killed (SIGKILL, an OOM kill, its node restarting), a push sidecar leaves its leases running in Redis.
Nothing heartbeats them any more, but they lapse only a lease TTL after the last heartbeat (30 s by
default) and are requeued at the next reap after that, so a restarted pod's step waited that long
for items nobody ran. The process that replaces it under the same worker id knows at start that none
of them still runs: the engine requests died with the old process (an engine aborts a request whose
connection closed). So before it claims anything it hands them back, without spending attempts
(``Delivery.reset``, ``lua/reset.lua``), in every active schedule: the reaper's walk, so every lease a
reaper would one day requeue, whether or not this process has heard of the schedule. Only an item's
first hand-back so is free (``keys.RESET_REFUNDS``): one held at a second death spends its attempt,
so an item whose run kills the sidecar every time is dead-lettered after ``max_attempts``.

The hazard is a second LIVE sidecar misconfigured with the same worker id, whose leases look the
same. So every sidecar keeps a presence key (``keys.sidecar_presence``: its random instance id,
rewritten every third of ``PRESENCE_TTL_MS``, deleted at a graceful exit). At start:

* no key: no sidecar of this id is alive -> hand back now;
* a key of another instance: wait until its time-to-live has run out. Gone: it died -> hand back.
  Still there: it was rewritten, a live sidecar uses this id -> hand back nothing and log an error;
  the other logs one too when it finds this instance in the key. The two then share the worker's
  queue, as before.

The reset also keeps every lease taken or extended since this process started (``age_ms``): its own,
and those a live holder heartbeated meanwhile. Should a live holder lose a lease anyway (its presence
lapsed through a stall longer than ``PRESENCE_TTL_MS``), fencing keeps results exactly-once: its late
completion carries the old token and is refused STALE, and its next heartbeat stops that request.

Redis down at start: ``run`` retries every ``retry_s`` (one warning per outage) and claims wait.
A pass that Redis cuts short is retried over the schedules whose answer did not land, each reset
named by this process's instance id (``Delivery.reset``'s ``call_id``): one that ran and lost its
reply answers that run's counts again, so every lease handed back is counted once. It used to run
afresh, find those leases gone and count nothing.
A push sidecar whose plain Redis was down at start has not asked its version yet (``launch``): the
takeover asks it (``version``) before its first write, as the runner's loop does before its first
claim. It used to run beside that check, and when the server came back too old it could hand back
leases and write the presence key before the loop refused the server, and the sidecar exited with
the key left to lapse: one that refuses a server must write nothing to it.

Pull mode (``pull_state``) runs the same once its session has reached Redis. There the worker process
is not the sidecar and may outlive it, still running what the dead one handed it: those leases are
handed back all the same (nothing tells which a worker still runs), and the worker's ``/done`` of one
is then refused STALE by its token, so results stay exactly-once; one it sends before the hand-back
lands, and that lease is then no longer held to hand back.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import redis

from service.delivery.errors import REDIS_FAILED, UnknownScheduleError
from service.delivery.keys import PRESENCE_TTL_MS, sidecar_presence
from service.delivery.views import text
from service.redis_conn import RedisTooOldError, VersionCheck
from service.sidecar.claims import NOT_THE_SCHEDULES
from service.sidecar.session import WorkerSession
from service.sidecar.waits import sleep_unless

log = logging.getLogger("service.sidecar")
MARGIN_S = 0.1  # past a presence key's time-to-live before it is read again (the server's expiry)
# Deletes the presence key only while it is still this process's (a twin may have rewritten it).
_LEAVE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"


@dataclass(frozen=True, slots=True)
class TakeoverReport:
    """What a sidecar's start did with the leases its worker id held from an earlier process."""

    released: int = 0  # current leases back at the head of the worker's queue, attempts refunded
    requeued_lapsed: int = 0  # leases that had lapsed already: requeued as the reaper would
    dead_lettered: int = 0  # lapsed leases, or current ones past their refunds, out of attempts
    charged: int = 0  # current leases whose item was handed back so before: requeued, attempt spent
    twin: str | None = None  # instance id of a live sidecar found using this worker id: nothing done


@dataclass
class Takeover:
    """Hands back a dead predecessor's leases, then keeps this process's presence key fresh."""

    session: WorkerSession
    retry_s: float = 0.5  # pause before trying again while Redis does not answer
    instance: str = field(default_factory=lambda: uuid.uuid4().hex)  # this process, in the presence key
    started: float = field(default_factory=time.monotonic)  # leases extended since are a live process's
    version: VersionCheck | None = None  # a plain Redis down at start: asked before the first write
    done: asyncio.Event = field(default_factory=asyncio.Event)  # set once claims may start
    report: TakeoverReport | None = None  # what the start did (None until ``done``)
    marked: bool = False  # its presence key written at least once (a graceful exit deletes it)
    _told: set[str] = field(default_factory=set)  # other instances found using this id (logged once)
    _handed: list[int] = field(default_factory=lambda: [0, 0, 0, 0])  # released, lapsed, dead, charged
    _answered: set[str] = field(default_factory=set)  # schedules whose reset's answer was counted
    # awaited before the hand-back (pull mode: the retries of reports refused while connecting)
    before_reset: Callable[[asyncio.Event], Awaitable[None]] | None = None

    @property
    def key(self) -> str:
        """This worker's presence key."""
        return sidecar_presence(self.session.settings.worker_id, self.session.delivery.prefix)

    async def run(self, stop: asyncio.Event) -> None:
        """Take over (retried through Redis outages), set ``done``, then mark this process present
        every third of ``PRESENCE_TTL_MS`` until cancelled; ``RedisTooOldError``, having written
        nothing, when ``version`` finds the server too old (the runner stops on its own check).
        Stopped first (before the takeover, or in its wait on a key): ``done`` and return, writing
        nothing. Its presence loop's first write met the key it had not waited out, a dead
        process's as well as a twin's, and named it a twin (review50c)."""
        failing = False
        while self.report is None and not stop.is_set():
            try:
                self.report = await self._take_over(stop)
            except REDIS_FAILED as exc:
                if not failing:  # once per outage
                    log.warning(
                        "redis unavailable, not claiming until an earlier process's leases are checked: %s",
                        exc,
                    )
                failing = True
                await sleep_unless(stop, self.retry_s)
        self.done.set()
        if self.report is None or stop.is_set():
            return  # stopped before it judged a key it found: no presence to keep, no twin to name
        while True:
            with contextlib.suppress(*REDIS_FAILED):  # claims and heartbeats report an outage
                await asyncio.to_thread(self._mark)
            await asyncio.sleep(PRESENCE_TTL_MS / 3000)

    async def leave(self, within_s: float) -> None:
        """Delete the presence key if still ours (a graceful exit: the next start need not wait);
        nothing is sent when ``within_s`` is not positive (the drain's time is spent)."""
        if within_s <= 0:
            return
        with contextlib.suppress(Exception):  # Redis gone: the key lapses within PRESENCE_TTL_MS
            client = self.session.delivery.client
            async with asyncio.timeout(within_s):  # not wait_for: see service/sidecar/waits.py
                await asyncio.to_thread(client.eval, _LEAVE, 1, self.key, self.instance)

    async def _take_over(self, stop: asyncio.Event) -> TakeoverReport:
        if self.version is not None:
            await asyncio.to_thread(_require, self.version)
        holder, ttl_ms = await asyncio.to_thread(self._present)
        waited = holder is not None
        if waited:
            log.info(
                "a sidecar of this worker id was alive %.1fs ago; waiting to see if it still is",
                (PRESENCE_TTL_MS - ttl_ms) / 1000,
            )
            await sleep_unless(stop, ttl_ms / 1000 + MARGIN_S)
            if stop.is_set():
                return TakeoverReport()
            holder, _ = await asyncio.to_thread(self._present)
            if holder is not None:  # rewritten since: a live sidecar
                self._twin(holder)
                return TakeoverReport(twin=holder)
        if self.before_reset is not None:
            await self.before_reset(stop)
        return await self._reset(waited)

    async def _reset(self, waited: bool = False) -> TakeoverReport:
        """``Delivery.reset`` in every active schedule; a schedule that fails is logged and skipped.
        After a wait on an earlier process (``waited``) the outcome is logged even when it held
        nothing: the wait's line would otherwise be the last word before claims start."""
        delivery, worker = self.session.delivery, self.session.settings.worker_id
        reset = functools.partial(delivery.reset, call_id=self.instance)  # a retry's answer: the first's
        for schedule_id in await asyncio.to_thread(delivery.active_schedules):
            if schedule_id in self._answered:
                continue  # a pass that Redis cut short, retried: this one's count has landed
            age_ms = int((time.monotonic() - self.started) * 1000)
            try:
                report = await asyncio.to_thread(reset, schedule_id, worker, age_ms)
            except UnknownScheduleError:
                continue  # expired meanwhile: nothing held in it
            except NOT_THE_SCHEDULES:
                raise  # Redis or this worker's user: every schedule would fail alike; retried
            except redis.ResponseError as error:
                log.error(
                    "could not hand back leases in schedule %s (damaged in Redis): %s", schedule_id, error
                )
                continue
            # counted once, as its answer lands: a reset whose answer was lost ran perhaps, and its
            # retry, under the same call id (this process's), answers that run's counts again
            self._answered.add(schedule_id)
            self.session.stats.reset += report.handed_back
            counts = (report.released, report.requeued_lapsed, report.dead_lettered, report.charged)
            for i, n in enumerate(counts):
                self._handed[i] += n
        released, lapsed, dead, charged = self._handed
        if waited and not released + lapsed + dead + charged:
            log.info("the earlier sidecar of this worker id is gone, holding no leases")
        if released + lapsed + dead + charged:
            log.warning(
                "handed back %d leases an earlier process of this worker held "
                "(%d released, %d had lapsed, %d dead-lettered, %d charged an attempt: "
                "handed back at an earlier restart too)",
                released + lapsed + dead + charged,
                released,
                lapsed,
                dead,
                charged,
            )
        return TakeoverReport(released, lapsed, dead, charged)

    def _present(self) -> tuple[str | None, int]:
        """Another process's instance id in the presence key and the key's time left (ms); (None, 0)
        when the key is absent or this process's own."""
        pipe = self.session.delivery.client.pipeline(transaction=False)
        pipe.get(self.key)
        pipe.pttl(self.key)
        value, ttl = pipe.execute()
        if value is None or text(value) == self.instance or int(ttl) == -2:
            return None, 0
        return text(value), PRESENCE_TTL_MS if int(ttl) < 0 else min(int(ttl), PRESENCE_TTL_MS)

    def _mark(self) -> None:
        previous = self.session.delivery.client.set(self.key, self.instance, px=PRESENCE_TTL_MS, get=True)
        self.marked = True
        if previous is not None and text(previous) != self.instance:
            self._twin(text(previous))

    def _twin(self, other: str) -> None:
        if other not in self._told:
            self._told.add(other)
            log.error(
                "another live sidecar (instance %s) runs as worker %s: two sidecars share its queue, and "
                "neither hands back the other's leases at start; give each its own --worker-id",
                other,
                self.session.settings.worker_id,
            )


def _require(version: VersionCheck) -> None:
    """``RedisTooOldError`` when the server is too old; ``redis.RedisError`` while it does not answer
    (the takeover's outage, retried); the check is made once, shared with the runner's loop."""
    refusal = version.check()
    if refusal is not None:
        raise RedisTooOldError(refusal)

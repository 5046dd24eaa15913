"""The push sidecar's watch on its engine while items run, and on items a healthy engine keeps failing.

Why. A generation may take many minutes, so its request has no read timeout, and the heartbeat keeps
its lease alive for as long as it runs: an engine that freezes (SIGSTOPped, a hung GPU, a deadlocked
scheduler) would hold every item it runs forever, out of reach of the reaper and of thieves, while
the sidecar looked healthy. So while items run, ``EngineWatch.watch`` asks the engine's ``/health``
every few seconds with a short timeout; an engine with no sign of life (no probe answered, no
generation finished) for ``stall_s`` is declared stalled, and the runner hands its items back.

The other way round: an engine that drops the connection or answers a 5xx for one item only, while
it answers its health probe and finishes other items, is not down. Released for free every time, that
item would come straight back and loop forever. ``EngineWatch.charge`` counts those failures per item
(a strike only when the engine proved healthy right after); from the ``STRIKES``-th on, the item is
reported failed, spends an attempt and ends dead-lettered after its ``max_attempts``.

Between the two: an engine that answers its probe and finishes other items but never returns one (a
stuck sequence: real vLLM and SGLang bugs do this) shows life, so ``watch`` never trips, and the item
never fails, so ``charge`` never hears of it; its lease, heartbeated, would be held for ever and its
step would never end. ``EngineWatch.hangs`` gives every running item the bound a pull worker's item
has (``holds``: ``--engine-hang-timeout``, longer for an item whose cap takes longer at a quarter of
the measured rate); one past it has its request closed (vLLM aborts the sequence) and, as a pull
worker's, is reported failed: an attempt spent, in Redis, so one that hangs at every run is
dead-lettered after its attempts however many sidecars (or restarts of one) ran it. Struck here for
free instead, as a dropped connection is, each process's strikes started at 0, and a hang costs a
whole bound (an hour by default), not the seconds a dropped request does.

Both ends, a failed request's (the runner) and a hang's, go through ``retry_or_fail``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from service.delivery.errors import UnknownScheduleError
from service.logs import schedule_context
from service.sidecar.engine_client import EngineClient
from service.sidecar.engine_reply import EngineError
from service.sidecar.holdings import Held, lease_id
from service.sidecar.holds import overdue
from service.sidecar.session import WorkerSession

STRIKES = 3  # failures of one item by a healthy engine before the item, not the engine, is blamed
REMEMBERED = 10_000  # items whose strikes are kept (oldest forgotten first): bounded memory
ItemId = tuple[str, str]  # (schedule id, item key): the same item across its leases
log = logging.getLogger("service.sidecar")


@dataclass
class EngineWatch:
    """Proof of the engine's life while items run, and per-item strikes."""

    engine: EngineClient
    probe_interval_s: float = 5.0  # between health probes while items run
    stall_s: float = 30.0  # no sign of life this long while items run: the engine is stalled
    last_alive: float = field(default_factory=time.monotonic)  # monotonic time of the last sign
    _strikes: OrderedDict[ItemId, int] = field(default_factory=OrderedDict, init=False)

    def alive(self) -> None:
        """Record a sign of life: a probe or a generation answered."""
        self.last_alive = time.monotonic()

    async def healthy(self) -> bool:
        """Whether the engine answers its health probe now (within the probe timeout)."""
        try:
            await self.engine.probe()
        except EngineError:
            return False
        self.alive()
        return True

    async def watch(self, busy: Callable[[], bool], on_stall: Callable[[float], Awaitable[None]]) -> None:
        """Probe while ``busy()``; call ``on_stall(silent_s)`` once the engine was silent ``stall_s``."""
        while True:
            await asyncio.sleep(self.probe_interval_s)
            if not busy():  # nothing held on the engine: the main loop's readiness check covers it
                self.alive()
                continue
            if await self.healthy():
                continue
            silent_s = time.monotonic() - self.last_alive
            if silent_s >= self.stall_s:
                await on_stall(silent_s)
                self.alive()

    async def charge(self, item: ItemId, error: EngineError) -> str | None:
        """The reason to fail ``item`` for an engine-down ``error``, or None to release it for free.

        A strike counts only for an error a healthy engine may give one item (``error.suspect``) and
        only when the engine proved healthy right after: its probe answered, or a generation
        finished meanwhile. An engine that is really down is not struck against the item (the runner
        refunds an item whose request it lost as it died only once: ``Delivery.release`` died).
        """
        if not error.suspect or not await self._alive_since(time.monotonic()):
            return None
        strikes = self._strikes.pop(item, 0) + 1
        self._strikes[item] = strikes
        while len(self._strikes) > REMEMBERED:
            self._strikes.popitem(last=False)
        if strikes < STRIKES:
            return None
        return f"engine failed this item {strikes} times while serving others: {error}"

    async def _alive_since(self, since: float) -> bool:
        """Whether the engine proved alive after ``since``: its probe answers now, or a generation
        finished meanwhile (an engine busy past the probe's timeout is not down)."""
        return await self.healthy() or self.last_alive > since

    def forget(self, item: ItemId) -> None:
        """The item completed: its strikes are history."""
        self._strikes.pop(item, None)

    async def hangs(
        self, session: WorkerSession, floor_s: float, stop: Callable[[Held], Awaitable[None]]
    ) -> None:
        """Hand back each item running past its bound (``holds.overdue`` with ``floor_s``), its request
        closed by ``stop`` first; looked for every probe interval (a quarter of a shorter bound)."""
        holdings = session.holdings
        while True:
            await asyncio.sleep(min(self.probe_interval_s, floor_s / 4))
            for held in overdue(holdings, floor_s):
                if not _running(session, held):  # answered, lost or handed back since it was listed
                    continue
                with schedule_context(held.lease.schedule_id):
                    try:
                        await self._hung(session, held, stop)
                    except Exception:  # never let this loop die: the next hang would be held for ever
                        log.exception("could not hand back %s", held.lease.key)

    async def _hung(
        self, session: WorkerSession, held: Held, stop: Callable[[Held], Awaitable[None]]
    ) -> None:
        """Stop ``held`` and report it failed (an attempt spent, its retry sent to another worker), or
        release it for free when the engine does not prove alive right after (down: the stall's case,
        not the item's); one warning. A late answer is refused by the lease's token."""
        held_s, lease = session.holdings.held_for(held), held.lease
        await stop(held)
        if not _running(session, held):
            return  # its answer came as it was stopped: the completion decides
        alive = await self._alive_since(time.monotonic())
        reason = f"no answer from the engine in {held_s:.0f}s while it served others" if alive else None
        if not _running(session, held):
            return  # a stall or a heartbeat that found the lease gone handed it back meanwhile
        log.warning(
            "item %s of schedule %s got no answer from the engine in %.0fs: request closed, %s",
            lease.key,
            lease.schedule_id,
            held_s,
            "reported failed" if alive else "released: the engine is not answering",
        )
        await retry_or_fail(session, held, reason)


async def retry_or_fail(session: WorkerSession, held: Held, reason: str | None, died: str = "") -> None:
    """Hand back an item the engine did not answer: released for a retry, no attempt spent, when
    ``reason`` is None (``died``: what died running it, refunded once per item, ``Delivery.release``),
    else reported failed with ``reason``. Never raises: the runner's item task and the hang loop
    both end here, and neither may die of it.

    A schedule gone from Redis (retention passed, Redis lost its data) takes nothing back: the lease
    is forgotten (``release`` and ``fail`` drop it before they ask Redis, so no heartbeat keeps it),
    one warning, and it ends once in the counters (``fail``: ``stale``, as its completion would;
    ``release``: ``lost``, as a heartbeat finds it), so claimed still balances what ended. Redis
    down past the session's retry window: the lease is forgotten too; a release's lapses (a reaper
    requeues the item), counted ``lost``; a failure report is kept and sent again at the next
    heartbeats (``resends.py``), counted as Redis answers it (a landed one DUPLICATE: ``failed``)."""
    lease = held.lease
    try:
        if reason is None:
            await session.release([held], died=died)
        else:
            await session.fail(held, reason)
    except UnknownScheduleError:
        log.warning("schedule %s is gone from Redis; %s needs no hand-back", lease.schedule_id, lease.key)
    except Exception:
        what = "its lease will lapse" if reason is None else "its failure report is sent again later"
        log.exception("could not hand back %s; %s", lease.key, what)


def _running(session: WorkerSession, held: Held) -> bool:
    """Whether ``held`` is still held and not being completed (its answer came: the completion decides)."""
    return not held.completing and session.holdings.get(lease_id(held.lease)) is held

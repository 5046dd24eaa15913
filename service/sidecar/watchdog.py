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
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from service.sidecar.engine_client import EngineClient, EngineError

STRIKES = 3  # failures of one item by a healthy engine before the item, not the engine, is blamed
REMEMBERED = 10_000  # items whose strikes are kept (oldest forgotten first): bounded memory
ItemId = tuple[str, str]  # (schedule id, item key): the same item across its leases


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
        if not error.suspect:
            return None
        failed_at = time.monotonic()
        if not await self.healthy() and self.last_alive <= failed_at:
            return None
        strikes = self._strikes.pop(item, 0) + 1
        self._strikes[item] = strikes
        while len(self._strikes) > REMEMBERED:
            self._strikes.popitem(last=False)
        if strikes < STRIKES:
            return None
        return f"engine failed this item {strikes} times while serving others: {error}"

    def forget(self, item: ItemId) -> None:
        """The item completed: its strikes are history."""
        self._strikes.pop(item, None)

"""The second SIGTERM or SIGINT: what is left of a shutdown gets the release grace from it, no more.

Why. A first signal drains: running items may finish for ``--drain-timeout``, then what is held is
handed back within the release grace (2 s) past it, Redis answering or not. A second signal (a second
Ctrl-C, an operator's second ``kill``) means "exit now". It used to stop the running items only: a
hand-back or a claim already waiting on a stalled Redis went on waiting until the first signal's
deadline plus the grace (22 s with the default drain timeout), and in pull mode a second SIGTERM did
nothing at all. Now every wait of the shutdown ends by the release grace after the second signal: what
Redis takes by then is handed back, and what it does not is left to lapse, its lease requeued by the
reaper a TTL later, as if the sidecar had died (counted ``lost``, so the counters still balance). The
grace is one round trip on an answering Redis, so there the items still go back at once. A third
signal, and any later one, changes nothing: the end is set once, by the second.

In push mode a loop that dies of a bug hurries the shutdown the same way (``runner.Sidecar.run``);
in pull mode it drains as a first signal does (``launch.run_pull``), so a signal after it hurries.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from service.sidecar.waits import done_unless

T = TypeVar("T")
MIN_TRY_S = 0.1  # a hand-back cut at once still starts (its leases are counted as it ends)


@dataclass
class Hurry:
    """Set once by the second signal; the end it puts on every later (and waiting) step of the shutdown."""

    grace_s: float  # what is left of the shutdown gets this long past the second signal
    event: asyncio.Event = field(default_factory=asyncio.Event)
    at: float | None = None  # monotonic time it was set

    def set(self) -> None:
        """The second signal (or a loop's death): from now the shutdown ends within ``grace_s``."""
        if self.at is None:
            self.at = time.monotonic()
        self.event.set()

    def is_set(self) -> bool:
        """Whether the shutdown is hurried."""
        return self.event.is_set()

    def ends(self, planned: float) -> float:
        """The monotonic time a step planned to end at ``planned`` ends: the grace after the hurry if
        that is sooner."""
        return planned if self.at is None else min(planned, self.at + self.grace_s)

    async def bound(self, work: Coroutine[Any, Any, T], planned: float) -> T:
        """Run ``work`` until it is done, or until ``ends(planned)``, moved sooner by a hurry that comes
        while it waits; past it ``work`` is cancelled, and ended, and ``TimeoutError`` raised. It is
        always given ``MIN_TRY_S``, so a hand-back starts and counts what it leaves."""
        task = asyncio.ensure_future(work)
        loop = asyncio.get_running_loop()

        def at(end: float) -> float:  # a monotonic time on the loop's clock, ``MIN_TRY_S`` at least
            return loop.time() + max(MIN_TRY_S, end - time.monotonic())

        try:
            async with asyncio.timeout_at(at(self.ends(planned))) as limit:
                if not self.is_set() and not await done_unless(self.event, task):
                    limit.reschedule(min(at(self.ends(planned)), limit.when() or at(planned)))
                return await task
        finally:
            if not task.done():  # cut: its own handlers run (a release counts its leases lost)
                task.cancel()
                await asyncio.wait([task])

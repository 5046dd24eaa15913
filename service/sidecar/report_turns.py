"""Reports of one lease take turns: a second waits until the first has been answered.

A pull worker may have two reports of one lease in flight at once: a ``/done`` and a ``/fail`` sent
together, or a ``/done`` sent again while the first is still being answered (its client timed out).
Both found the lease held, both went to Redis, and the loser's refusal (``stale``) or repeat
(``duplicate``) was counted beside the winner's end: one lease counted twice, and ``claimed + stolen
+ inherited`` no longer balanced what ended (docs/sidecar.md, counters). Waiting its turn, the second
finds the lease as the first left it: no longer held (answered by Redis, counted nowhere: the first
counted its end), or still held when the first went unanswered (the report goes on as the first).
The heartbeat's resend of an unanswered completion (``resends.py``) takes a turn too, and so does the
hold bound's failure report of an item the worker dropped (``PullState.abandon``), which takes it at
once as it drops the lease.

Redis still decides the outcome of every report by the lease's token; the turn only orders what
this sidecar counts. Pure asyncio bookkeeping, no I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

from service.problems.details import clipped
from service.sidecar.holdings import LeaseId

log = logging.getLogger("service.sidecar")


class ReportTurns:
    """The leases with a report in flight, each with the event its end sets."""

    def __init__(self) -> None:
        self._ends: dict[LeaseId, asyncio.Event] = {}

    def busy(self, lease: LeaseId) -> bool:
        """Whether a report of ``lease`` is in flight."""
        return lease in self._ends

    def take(self, lease: LeaseId) -> Callable[[], None]:
        """Take the turn of ``lease`` now, which must be free (``busy`` false); the function returned
        gives it up, once however often it is called. Synchronous, so a caller that found the turn free
        holds it before anything else runs: the pull hold bound's failure report (``PullState.abandon``)
        takes it as it drops the lease, before the await that would let a worker's report in first."""
        assert not self.busy(lease), lease
        ended = self._ends[lease] = asyncio.Event()

        def end() -> None:
            if self._ends.get(lease) is ended:
                del self._ends[lease]
            ended.set()

        return end

    @contextlib.asynccontextmanager
    async def of(self, lease: LeaseId) -> AsyncIterator[None]:
        """The turn of one report of ``lease``: at once when none is in flight (no await in between,
        so a caller that found it free holds it before anything else runs), else once each report
        ahead of it has been answered."""
        if self.busy(lease):
            log.debug("report of %s (token %d) waits for the report in flight", clipped(lease[1]), lease[2])
        while (ended := self._ends.get(lease)) is not None:
            await ended.wait()
        end = self.take(lease)
        try:
            yield
        finally:
            end()

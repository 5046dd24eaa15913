"""A worker's inbox as its claims read it, and what a claim walks when the inbox does not answer.

Every claim first reads the worker's inbox (``keys.inbox``: one key, so one hash slot, so one master of
a Redis Cluster), then walks the schedules it names (``WorkerSession.schedules``). Where that master
was down, every claim of the worker raised (the runner's "redis unavailable, not claiming", the
readiness probe down) though its schedules on the other masters answered and their items waited:
with no replica for as long as the master stayed down, with one until its failover (a few seconds at
the tests' 2 s node timeout, over 15 s at valkey's default: inbox64, docs/experiments.md).

The inbox is discovery, not a guard. A claim's script decides on the schedule's own keys whether
anything may be leased (a cancelled, finished, expired or drained schedule leases nothing; the lease,
its token and its acceptance are the schedule's), so a claim on a schedule the session already knows
is as safe without the inbox as with it. So where the inbox's slot or master does not answer (a
walk's ``catches``), a claim walks the schedules the session knows, oldest published first, as the
inbox orders them. What the worker misses meanwhile is what only the inbox says: schedules published
since (their announce to it fails too: the publisher's retry repairs it), and that a held schedule
was cancelled (found at the next refused report or heartbeat instead, as the inbox's own outage had
it). A session that knows no schedule, or a cluster that is down as a whole, raises as before.

Once a read failed, the inbox is asked again ``RETRY_S`` later, in the background: the claims walk
the known without waiting for it, and the first claim after its answer reads it. Asked by every claim,
a master whose process is gone cost each claim the client's retries (0.13 s), and a silent one (a host
down, a process stopped) its socket timeout three times over (15 s at the sidecar's 5 s); asked every
``RETRY_S`` by a claim that waited, the silent one still held three claim turns in four that long.
A master back (or failed over) is read again within ``RETRY_S`` and its answer's turn. A read of a
claim's own that answers meanwhile (one with nothing known reads the inbox itself) drops the
background read: sent before it, that one's answer is older (``_answered``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from service.delivery.errors import whole_cluster_down
from service.delivery.progress import ScheduleInfo
from service.delivery.protocol import Delivery
from service.delivery.reach import Reach

log = logging.getLogger("service.sidecar")  # the session's logger: operators grep its lines there
RETRY_S = 5.0  # after a failed read, the inbox is asked again this much later (monotonic seconds)


@dataclass
class Inbox:
    """One worker's inbox reads by its claims, and whether the last one failed (told once)."""

    failing: Exception | None = None
    retry_at: float = 0.0  # monotonic: while ``failing``, asked again (in the background) from then
    _asking: asyncio.Task[list[str]] | None = field(default=None, init=False)  # that read, under way

    async def read(
        self, delivery: Delivery, worker_id: str, walk: Reach, known: Mapping[str, ScheduleInfo]
    ) -> list[str] | None:
        """The schedule ids announced to ``worker_id``, oldest first; None where the inbox's slot or
        master does not answer (one of ``walk.catches``) and ``known`` has schedules to claim from:
        the caller walks those (``known_order``). Raised where nothing is known, or the whole cluster
        is down (every known schedule would fail the same). While failing, ``_again``'s answer."""
        if self.failing is not None and known:
            return self._again(delivery, worker_id, walk)
        try:
            ids = await asyncio.to_thread(delivery.schedules_for, worker_id)
        except walk.catches as error:
            if not known or whole_cluster_down(error):
                raise
            if self.failing is None:
                log.warning(
                    "claims cannot read worker %s's inbox (its Redis Cluster slot or master does not"
                    " answer: %s); claiming from the %d schedules known, none published since",
                    worker_id,
                    error,
                    len(known),
                )
            self._failed(error)
            return None
        self._answered(worker_id)
        return ids

    def _again(self, delivery: Delivery, worker_id: str, walk: Reach) -> list[str] | None:
        """While failing: the background read's answer once it came (None where it failed too, the
        next one due ``RETRY_S`` later), else None, a read started where one is due. Never waited on:
        a silent master held each claim that asked it 15 s."""
        asking = self._asking
        if asking is None or asking.cancelled():  # cancelled: its event loop ended (a test's run)
            self._asking = None
            if time.monotonic() >= self.retry_at:
                self._asking = asyncio.ensure_future(asyncio.to_thread(delivery.schedules_for, worker_id))
                self._asking.add_done_callback(_retrieved)
            return None
        if not asking.done():
            return None
        self._asking, error = None, asking.exception()
        if error is None:
            self._answered(worker_id)
            return asking.result()
        if not isinstance(error, walk.catches):
            raise error
        self._failed(error)
        return None

    def _failed(self, error: Exception) -> None:
        """A read failed: the inbox is asked again ``RETRY_S`` from now."""
        self.failing, self.retry_at = error, time.monotonic() + RETRY_S

    def _answered(self, worker_id: str) -> None:
        """A read answered. A background read still under way, or answered and not taken yet, is
        dropped: sent before this answer, it says older news, and taken at the next outage it put
        back schedules the inbox had dropped since, and dropped those it had gained (review65)."""
        if self.failing is not None:
            log.info("claims read worker %s's inbox again", worker_id)
        self.failing, self._asking = None, None


def _retrieved(task: asyncio.Task[list[str]]) -> None:
    """Its error retrieved, for a read whose answer no claim came for (the session ended, or a read of
    the claims' own answered first: ``_answered``): asyncio logs "exception was never retrieved" for
    one that is not."""
    if not task.cancelled():
        task.exception()


def known_order(known: Mapping[str, ScheduleInfo], last: Collection[str]) -> list[ScheduleInfo]:
    """``known``'s schedules in the inbox's order (oldest published first, ties by id, as its sorted
    set has them), those in ``last`` (claims missed them since they answered) last, as the claim
    walks its inbox."""
    return sorted(known.values(), key=lambda i: (i.schedule_id in last, i.published_ms, i.schedule_id))

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

Once a read failed, the inbox is asked again only ``RETRY_S`` later, the claims between walking the
known unasked: asked at every claim, a master whose process is gone cost each claim the client's
retries (0.13 s), and a silent one (stopped, cut off) its socket timeout three times over (15 s at the
sidecar's 5 s), every claim of the outage. A master back (or failed over) is read again within it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass

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
    retry_at: float = 0.0  # monotonic: not asked before this while ``failing``

    async def read(
        self, delivery: Delivery, worker_id: str, walk: Reach, known: Mapping[str, ScheduleInfo]
    ) -> list[str] | None:
        """The schedule ids announced to ``worker_id``, oldest first; None where the inbox's slot or
        master does not answer (one of ``walk.catches``) and ``known`` has schedules to claim from:
        the caller walks those (``known_order``). Raised where nothing is known, or the whole cluster
        is down (every known schedule would fail the same). A warning once an outage, a line at its end.
        While failing, None unasked until ``retry_at`` (``RETRY_S`` after the last failed read)."""
        if self.failing is not None and known and time.monotonic() < self.retry_at:
            return None
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
            self.failing, self.retry_at = error, time.monotonic() + RETRY_S
            return None
        if self.failing is not None:
            log.info("claims read worker %s's inbox again", worker_id)
        self.failing = None
        return ids


def known_order(known: Mapping[str, ScheduleInfo], last: Collection[str]) -> list[ScheduleInfo]:
    """``known``'s schedules in the inbox's order (oldest published first, ties by id, as its sorted
    set has them), those in ``last`` (claims missed them since they answered) last, as the claim
    walks its inbox."""
    return sorted(known.values(), key=lambda i: (i.schedule_id in last, i.published_ms, i.schedule_id))

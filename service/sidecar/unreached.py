"""Which schedules a sidecar's walks (its claims, its heartbeats) could not reach while the others
answered, told once each: a warning when one stops answering, a line when it answers again.

A Redis Cluster can serve its other slots while one slot has no master, or one master is down
(``cluster-require-full-coverage no``: ``service/delivery/reach.py``). A walk then passes that slot's
schedules over and goes on with the others, raising nothing, so the runner's "redis unavailable"
warning (a claim that raised) and the heartbeat's outage warning say nothing of it. Told at each walk,
it was a line per claim poll (several a second) or per heartbeat for as long as the slot stayed
unserved.

A claim walk runs on the sidecar's event loop (push mode's runner, pull mode's app: each awaits
``WorkerSession.claim``), its calls in threads. Its misses go through ``missed``, which asks the node
that has just said a slot is not served which others are (``Reach.learn``: one blocking call) in a
thread too, so the walk passes them over unasked, as the reaper's does (cluster51).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from service.delivery.reach import Reach

log = logging.getLogger("service.sidecar")  # the session's logger: operators grep its lines there


@dataclass
class Unreached:
    """The schedules one kind of walk (``what``: "claims", "heartbeats") finds unreachable now."""

    what: str
    now: set[str] = field(default_factory=set)

    def tell(self, reach: Reach) -> None:
        """Log the schedules ``reach`` missed that were reachable before, and those it reached again."""
        for schedule_id in sorted(set(reach.missing) - self.now):
            log.warning(
                "%s do not reach schedule %s (its Redis Cluster slot or master does not answer: %s);"
                " going on with the others",
                self.what,
                schedule_id,
                reach.missing[schedule_id],
            )
        for schedule_id in sorted(self.now & reach.answered):
            log.info("%s reach schedule %s again", self.what, schedule_id)
        self.now = (self.now - reach.answered) | set(reach.missing)


async def missed(walk: Reach, schedule_id: str, error: Exception) -> None:
    """``walk.missed``, then, where a node has just said ``schedule_id``'s slot is not served, that
    node asked in a thread which other slots no master serves: each such schedule of the walk had cost
    a call of 0.26 s (redis-py's fixed wait on that error); asked on the event loop, every other
    coroutine of the sidecar (heartbeats, the pull API) would have waited for the answer."""
    walk.missed(schedule_id, error)
    if walk.unasked:
        await asyncio.to_thread(walk.learn)

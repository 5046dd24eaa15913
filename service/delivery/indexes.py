"""Announcing a schedule: the reapers' index of active schedules and each worker's inbox, and retiring it.

A sidecar looks for work in its inbox, a reaper walks the active index; neither scans keys. Both are
sorted sets outside the schedule's hash slot (single-key commands, so any slot of a Redis Cluster),
written after the schedule's atomic publish in a second round trip. So they are kept right by
repair, not atomicity: every publish, replay and cancel re-derives them from the schedule's own
counts, and a schedule that has settled is retired however the two raced. ``Delivery`` inherits
this; kept apart so each module reads in one sitting.
"""

from __future__ import annotations

from collections.abc import Sequence

from service.delivery import keys as keyspace
from service.delivery.errors import UnknownScheduleError
from service.delivery.views import DeliveryViews


class DeliveryIndexes(DeliveryViews):
    """The active index and the worker inboxes of one deployment; ``Delivery`` adds the atomic steps."""

    def announce(self, schedule_id: str, retention_s: int) -> None:
        """Announce a stored schedule again; ``UnknownScheduleError`` when there is none.

        ``publish`` stores atomically, then announces in a second round trip; a timeout or OOM in
        between leaves a schedule no sidecar sees. The caller's retry (same ``schedule_id``) is the
        one who knows, so the refusal of that retry repairs it here (idempotent).
        """
        self._announce(schedule_id, sorted(self.info(schedule_id).workers), retention_s)

    def _announce(self, schedule_id: str, workers: Sequence[str], retention_s: int) -> None:
        """Index the schedule for reapers and each worker's inbox (single-key commands: any slot).

        A schedule that is already finished (a replay after the work was done, or an empty one) or
        cancelled is retired instead, so replays never put finished work back in front of the sidecars.
        """
        published = self._unsettled_since(schedule_id)
        if published is None:
            self._retire(schedule_id)
            return
        horizon = published - retention_s * 1000
        inboxes = [keyspace.inbox(w, self.prefix) for w in workers]
        pipe = self.client.pipeline(transaction=False)
        for index in (keyspace.active_index(self.prefix), *inboxes):
            pipe.zadd(index, {schedule_id: published})
            pipe.zremrangebyscore(index, "-inf", f"({horizon}")
        for inbox in inboxes:
            pipe.pttl(inbox)
        ttls = pipe.execute()[-len(inboxes) :] if inboxes else []
        # Pruning above needs a later announce to the same worker; an expiry does not. Only ever
        # extended (a schedule with a shorter retention must not cut one with a longer one short).
        life_ms = (retention_s + keyspace.INBOX_MARGIN_S) * 1000
        longer = [inbox for inbox, ttl in zip(inboxes, ttls, strict=True) if int(ttl) < life_ms]
        if longer:
            pipe = self.client.pipeline(transaction=False)
            for inbox in longer:
                pipe.pexpire(inbox, life_ms)
            pipe.execute()
        if self._unsettled_since(schedule_id) is None:  # settled or cancelled meanwhile: that retire
            self._retire(schedule_id)  # may have run before the announce above, which undid it

    def _unsettled_since(self, schedule_id: str) -> int | None:
        """The schedule's publish time while some item is still queued or running, else None (also
        for a schedule whose keys are gone: nothing to announce)."""
        keys = self.keys(schedule_id)
        pipe = self.client.pipeline(transaction=True)
        pipe.hmget(keys.meta, ["published_ms", "total"])
        pipe.hmget(keys.counts, [keyspace.DONE, keyspace.FAILED, keyspace.CANCELLED])
        (published, total), settled = pipe.execute()
        if total is None or int(total) <= sum(int(v or 0) for v in settled):
            return None
        return int(published)

    def _retire(self, schedule_id: str) -> None:
        """Drop a finished schedule from the indexes; its keys stay until retention for reading."""
        try:
            workers = self.info(schedule_id).workers
        except UnknownScheduleError:
            workers = ()
        pipe = self.client.pipeline(transaction=False)
        for index in (keyspace.active_index(self.prefix), *(keyspace.inbox(w, self.prefix) for w in workers)):
            pipe.zrem(index, schedule_id)
        pipe.execute()

"""Steps cut short: the schedules a batch of actuals names that were cancelled before they finished.

A cancelled step's results are the trajectories that finished before the cancel: the short ones,
since the long ones were still queued or decoding. Reported as actuals they teach the predictor a
length distribution biased short (found live: one such report moved the mean prediction from 588 to
457 tokens, and it took several steps to recover). ``POST /actuals`` therefore refuses a batch that
names such a step, unless the batch says it is ``partial`` (the caller knows, and wants them).

Read from the schedule's own keys, through the names ``service/delivery/keys.py`` gives them:
``P:counts`` field ``c`` (the items the cancel ended, queued or running) and ``P:meta`` ``total``.
A step cancelled after every item finished ended none: its results are whole. A schedule the service
no longer holds (its retention passed) or never published (imported history, a dry run) cannot be
told apart from a whole one, and is taken as whole, as before. The check is a read made when the
batch arrives, before anything is stored; a cancel that lands between it and the append is not seen
(the trainer that cancels is the one that reports, one after the other).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from service.delivery import keys as keyspace
from service.delivery.views import text
from service.redis_conn import RedisClient


@dataclass(frozen=True, slots=True)
class CutShort:
    """A schedule whose cancel ended some of its trajectories unfinished."""

    schedule_id: str
    cancelled: int  # trajectories the cancel ended (queued or running then)
    total: int  # trajectories the step published


def cut_short(client: RedisClient, schedule_ids: Sequence[str], prefix: str) -> list[CutShort]:
    """Those of ``schedule_ids`` that were cancelled with trajectories unfinished, in their order.

    One pipelined round trip (not a transaction: on Redis Cluster the schedules live in many slots);
    each pair of reads is of one schedule, and a cancel writes both in one script."""
    pipe = client.pipeline(transaction=False)
    for schedule_id in schedule_ids:
        keys = keyspace.schedule_keys(schedule_id, prefix)
        pipe.hget(keys.counts, keyspace.CANCELLED)
        pipe.hget(keys.meta, "total")
    replies = pipe.execute()
    found = []
    for index, schedule_id in enumerate(schedule_ids):
        cancelled, total = replies[2 * index], replies[2 * index + 1]
        if cancelled is not None and total is not None and int(text(cancelled)) > 0:
            found.append(CutShort(schedule_id, int(text(cancelled)), int(text(total))))
    return found

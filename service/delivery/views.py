"""The read side of the delivery protocol: what is announced, a schedule's settings, progress, results.

Plain reads (no script): the service's progress and results routes, the reaper's and the metrics'
walks, and a sidecar's look for work. ``Delivery`` inherits them; kept apart so each module reads in
one sitting.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import redis
from redis.cluster import RedisCluster

from service.delivery import keys as keyspace
from service.delivery.errors import UnknownScheduleError
from service.delivery.progress import (
    CutShort,
    DeadLetter,
    Progress,
    ScheduleInfo,
    StepsChecked,
    StoredRequest,
    per_worker,
    planned_finishes,
    seconds_or_none,
)
from service.delivery.records import DeliveryItem, ResultRecord, TrajectoryResult
from service.delivery.stored import readable_or_none

# The lease clock: the scripts' ``now_ms('')`` (lua/common.lua), run on the node holding the schedule.
_CLOCK = "local t = redis.call('TIME') return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)"
_FIRST_CHUNK = 64  # results a byte-bounded read takes first; later reads are sized by the average size
_META_FIELDS = [
    "total",
    "kv_admission",
    keyspace.CANCELLED_AT,
    keyspace.PUBLISHED_AT,
    keyspace.PREDICTED_MAKESPAN,
    keyspace.PLANNED_FINISH,
    keyspace.ENGINE,
]
# Of ``_META_FIELDS``, those a schedule may lack (an older release did not store them): unreadable
# ones read as absent. The others are the publish's and the cancel's, written by their scripts alone.
_OPTIONAL_META = [
    keyspace.PUBLISHED_AT,
    keyspace.PREDICTED_MAKESPAN,
    keyspace.PLANNED_FINISH,
    keyspace.ENGINE,
]


def text(value: Any) -> str:
    """A Redis reply as text, whether the client decodes responses or not."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _optional_meta(meta_key: str, meta: Sequence[Any]) -> dict[str, str | None]:
    """``progress``' optional ``P:meta`` fields (``_OPTIONAL_META``) by name, each None when absent or
    not UTF-8 (``stored.readable_or_none``): an annotation another writer left unreadable must not
    fail the counts the trainer polls for."""
    return {name: readable_or_none(meta[_META_FIELDS.index(name)], meta_key, name) for name in _OPTIONAL_META}


class DeliveryViews:
    """Reads of one deployment's delivery keys; ``Delivery`` adds the atomic steps."""

    client: redis.Redis | RedisCluster  # set by Delivery
    prefix: str  # namespace of every key of this deployment

    def keys(self, schedule_id: str) -> keyspace.ScheduleKeys:
        """The names of one schedule's keys."""
        return keyspace.schedule_keys(schedule_id, self.prefix)

    def active_schedules(self) -> list[str]:
        """Schedule ids not yet finished, oldest first (what reapers walk)."""
        return [text(s) for s in self.client.zrange(keyspace.active_index(self.prefix), 0, -1)]

    def newest_schedules(self, count: int) -> list[str]:
        """The ``count`` most recently published unfinished schedules, oldest first."""
        return [text(s) for s in self.client.zrange(keyspace.active_index(self.prefix), -count, -1)]

    def cancelled(self, schedule_id: str) -> bool:
        """Whether the trainer cancelled the schedule (``Delivery.cancel``); False when unknown."""
        return bool(self.client.hexists(self.keys(schedule_id).meta, keyspace.CANCELLED_AT))

    def check_steps(self, schedule_ids: Sequence[str]) -> StepsChecked:
        """Those of ``schedule_ids`` cancelled with trajectories unfinished (``counts`` ``c`` > 0),
        and those whose keys are gone (retention passed) or never were, whose completeness cannot
        be checked, each in their order.

        One pipelined round trip, not a transaction (on Redis Cluster the schedules live in many
        slots); each schedule's two reads are of one cancel, which writes both in one script."""
        pipe = self.client.pipeline(transaction=False)
        for schedule_id in schedule_ids:
            keys = self.keys(schedule_id)
            pipe.hget(keys.counts, keyspace.CANCELLED)
            pipe.hget(keys.meta, "total")
        replies = pipe.execute()
        found, unchecked = [], []
        for index, schedule_id in enumerate(schedule_ids):
            cancelled, total = replies[2 * index], replies[2 * index + 1]
            if total is None:
                unchecked.append(schedule_id)
            elif cancelled is not None and int(text(cancelled)) > 0:
                found.append(CutShort(schedule_id, int(text(cancelled)), int(text(total))))
        return StepsChecked(cut_short=found, unchecked=unchecked)

    def stored_request(self, schedule_id: str) -> StoredRequest | None:
        """What the publish stored of the request beside the schedule (``Delivery.publish``'s
        ``digest`` and ``answer``), and whether it was cancelled; None when the id holds no schedule
        and was not withdrawn (``keys.ScheduleKeys.withdrawn``: ``withdrawn`` set, nothing stored).

        One transaction: the digest and the answer are read as one publish wrote them."""
        keys = self.keys(schedule_id)
        pipe = self.client.pipeline(transaction=True)
        pipe.hmget(keys.meta, ["total", keyspace.REQUEST_DIGEST, keyspace.CANCELLED_AT])
        pipe.get(keys.answer)
        pipe.exists(keys.withdrawn)
        (total, digest, cancelled), answer, withdrawn = pipe.execute()
        if total is None:
            return StoredRequest(None, None, cancelled=True, withdrawn=True) if withdrawn else None
        return StoredRequest(
            digest=None if digest is None else text(digest),
            answer=None if answer is None else text(answer),
            cancelled=cancelled is not None,
        )

    def stored_item(self, schedule_id: str, key: str) -> DeliveryItem | None:
        """Item ``key`` as published (its payload left out), or None when the schedule or the key is
        gone: for a report of a lease this process never held (a pull sidecar restarted under a
        worker that outlived it), which must still carry the item's token counts and cap."""
        stored = self.client.hget(self.keys(schedule_id).items, key)
        if stored is None:
            return None
        return DeliveryItem.from_json(json.loads(text(stored).split("\t", 1)[-1]))

    def schedules_for(self, worker_id: str) -> list[str]:
        """Unfinished schedule ids announced to ``worker_id``, oldest first (what a sidecar pulls)."""
        return [text(s) for s in self.client.zrange(keyspace.inbox(worker_id, self.prefix), 0, -1)]

    def info(self, schedule_id: str) -> ScheduleInfo:
        """The schedule's settings; ``UnknownScheduleError`` when absent or expired."""
        fields = ("workers", "total", "kv_admission", "lease_ttl_ms", "max_attempts", "published_ms")
        vals = self.client.hmget(self.keys(schedule_id).meta, [*fields, keyspace.DRAINED])
        if vals[0] is None:
            raise UnknownScheduleError(schedule_id)
        return ScheduleInfo(
            schedule_id=schedule_id,
            workers=tuple(json.loads(text(vals[0]))),
            total=int(text(vals[1])),
            kv_admission=text(vals[2]) == "1",
            lease_ttl_ms=int(text(vals[3])),
            max_attempts=int(text(vals[4])),
            published_ms=int(text(vals[5])),
            drained=tuple(json.loads(text(vals[6]))) if vals[6] is not None else (),
        )

    def totals(self, schedule_id: str) -> dict[str, int]:
        """The schedule's queued/running/done/failed totals alone (one HMGET: what a scrape needs,
        where ``progress`` also reads every dead letter)."""
        states = {"queued": keyspace.QUEUED, "running": keyspace.RUNNING}
        states.update(done=keyspace.DONE, failed=keyspace.FAILED)
        values = self.client.hmget(self.keys(schedule_id).counts, list(states.values()))
        if all(v is None for v in values):  # a published schedule always has its totals
            raise UnknownScheduleError(schedule_id)
        return {name: int(v or 0) for name, v in zip(states, values, strict=True)}

    def progress(self, schedule_id: str, now_ms: int | None = None) -> Progress:
        """One consistent snapshot of the schedule's counts, per worker, and its dead letters, with
        its publish time and what the plan predicts; ``now_ms`` pins the clock (tests, simulations).

        One round trip: the lease clock (an EVAL of ``_CLOCK`` on the meta key, so on Redis Cluster
        the node whose clock the schedule's scripts read) is read in the same transaction as the rest."""
        keys = self.keys(schedule_id)
        pipe = self.client.pipeline(transaction=True)
        pipe.hgetall(keys.counts)
        pipe.hmget(keys.meta, _META_FIELDS)
        pipe.lrange(keys.dead, 0, -1)
        if now_ms is None:
            pipe.execute_command("EVAL", _CLOCK, 1, keys.meta)  # ClusterPipeline has no eval()
        counts_raw, meta, dead, *clock = pipe.execute()
        if meta[0] is None:
            raise UnknownScheduleError(schedule_id)
        counts = {text(f): int(v) for f, v in counts_raw.items()}
        optional = _optional_meta(keys.meta, meta)
        published = seconds_or_none(optional[keyspace.PUBLISHED_AT])
        return Progress(
            schedule_id=schedule_id,
            total=int(meta[0]),
            queued=counts.get(keyspace.QUEUED, 0),
            running=counts.get(keyspace.RUNNING, 0),
            done=counts.get(keyspace.DONE, 0),
            failed=counts.get(keyspace.FAILED, 0),
            workers=per_worker(counts),
            dead_letters=tuple(DeadLetter.from_json(json.loads(text(d))) for d in dead),
            kv_admission=text(meta[1]) == "1",
            cancelled=counts.get(keyspace.CANCELLED, 0),
            cancelled_at_ms=None if meta[2] is None else int(meta[2]),
            published_ms=None if published is None else int(published),
            now_ms=now_ms if now_ms is not None or published is None else int(clock[0]),
            predicted_makespan_s=seconds_or_none(optional[keyspace.PREDICTED_MAKESPAN]),
            planned_finish_s=planned_finishes(optional[keyspace.PLANNED_FINISH]),
            engine=optional[keyspace.ENGINE],
        )

    def read_results(
        self,
        schedule_id: str,
        after_id: str = "0-0",
        count: int = 1000,
        block_ms: int | None = None,
        max_bytes: int | None = None,
    ) -> list[ResultRecord]:
        """Accepted results after stream id ``after_id`` (oldest first); block up to ``block_ms``.

        At most ``count`` and, with ``max_bytes``, no more than that many bytes of stored result JSON,
        but always the first result, however large, so a reader paging by ``stream_id`` always moves
        on: results with token ids and logprobs in ``extra`` run to tens of KB each, and a page of
        1,000 was tens of MB to read, render and send. Read in chunks sized by the results read so
        far, so little is read past the bound and thrown away (the next page reads it again)."""
        records: list[ResultRecord] = []
        size, after, want = 0, after_id, count if max_bytes is None else min(count, _FIRST_CHUNK)
        while True:
            chunk = self._results_chunk(schedule_id, after, want, block_ms)
            for record, stored in chunk:
                if records and max_bytes is not None and size + stored > max_bytes:
                    return records
                records.append(record)
                size += stored
            if max_bytes is None or len(chunk) < want or len(records) >= count:
                return records
            after, block_ms = records[-1].stream_id, None  # blocked once: until the first result
            each = max(1, size // len(records))
            want = min(count - len(records), max(1, (max_bytes - size) // each + 1))

    def _results_chunk(
        self, schedule_id: str, after_id: str, count: int, block_ms: int | None
    ) -> list[tuple[ResultRecord, int]]:
        """One XREAD of the results stream: each record with the length of its stored result JSON
        (compact ASCII JSON, ``wire.strict_json``: its characters are its bytes)."""
        stream = self.keys(schedule_id).results
        answer: Any = self.client.xread({stream: after_id}, count=count, block=block_ms)
        records: list[tuple[ResultRecord, int]] = []
        for _, entries in answer or []:
            for entry_id, fields in entries:
                f = {text(k): text(v) for k, v in fields.items()}
                record = ResultRecord(
                    stream_id=text(entry_id),
                    schedule_id=schedule_id,
                    key=f["key"],
                    worker_id=f["worker"],
                    token=int(f["token"]),
                    attempt=int(f["attempt"]),
                    result=TrajectoryResult.from_json(json.loads(f["result"])),
                )
                records.append((record, len(f["result"])))
        return records

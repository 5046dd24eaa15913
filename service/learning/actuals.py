"""Actuals: what each trajectory really produced, stored durably for retraining and speed learning.

Workers (or the trainer, through the client) report finished trajectories. Reports append to one
Redis stream, so they survive a service restart (and a Redis restart with AOF), replicas share them,
and retraining reads them in order, in pages, without holding them all in the service's memory.

Key: ``keys.actuals_stream`` (``<prefix>:actuals``, a stream; each entry one field ``a`` = the
report's JSON; every key and TTL is documented in ``service/delivery/keys.py``). It is capped
approximately at ``Settings.actuals_maxlen`` entries (oldest trimmed, ``XADD MAXLEN ~``); it does not
expire, because the history is what the predictor learns from.

A report is stored once: retrying a batch after a timeout or a 503 re-sends reports the first
attempt may have stored, and each copy would count again in every replica's history and in the
worker's learned speed. A report is identified by its whole content but its ``schedule_id``
(``report_digest``: every other field, as a retry re-sends the same body; a report that differs in
any of them, a re-measured wall time or another run's reward, is another report). The schedule id is
left out because it names the publish that ran the trajectory, not the trajectory: the same report
sent once with it and once without (a hand-made resend, a trainer that dropped it on retry) is the
same measurement, and counted twice it moved the learned speed twice; two genuinely different
trajectories alike in every measured field (step, prompt, sample, worker, lengths, wall time to the
float, concurrency, reward, features) are not met in practice, and when they lack a wall time (lengths
only) the fit drops the second anyway (same step, prompt, sample and output, ``predictors``). A report
naming a schedule is also looked up by the digest releases before 2026-12-05 gave it (with the
schedule id, ``report_digests``), so a retry that lands on an upgraded replica after an older one
stored the first attempt is still a retry. One script checks and appends atomically, so replicas
racing on the same retry store it once: ``keys.actuals_seen`` maps the digest of every report the
stream holds to its entry's ordinal, and is trimmed with the stream (digests of entries it no longer
holds go), so it holds no more entries than the stream.

A batch is stored in chunks of ``CHUNK`` reports, one script call each, not in one call: Redis runs a
script alone, and one call over the largest batch the API takes (100,000 reports) held the server for
0.75-1.5 s, stalling every sidecar's claim, heartbeat and completion on it; a chunk holds it ~10 ms.
What stays true:

- *Each report is stored once.* A report's check and append are atomic within its chunk's script, and
  every chunk reads the seen-zset as the chunks before it (this call's and any replica's) left it: a
  replica racing on the same retry stores each report in whichever chunk gets there first, and the
  other's chunk finds its digest. A report repeated within the batch, in one chunk or two, is found
  by its later copy the same way. (Store-once holds for the reports the stream still holds, as
  before: a digest goes when the stream trims its entry, and a copy sent after that is stored anew.)
- *The trim is per chunk and exact.* Each chunk reads ``entries-added`` afresh, numbers its entries on
  from it, trims the stream (``MAXLEN ~``) as it adds, and trims the zset to the ordinals the stream
  still holds, so after every chunk, as after the whole batch before, the zset holds exactly the
  digests of the stream's entries.
- *A failure part-way stores a prefix.* Chunks run in order and the first failure ends the call with
  that error (the endpoint answers it, 503 for a Redis outage), so the stored reports are the chunks
  before it (and possibly the failed one, if only its reply was lost). The client's retry of the
  same body then holds those (``repeated``) and stores the rest: nothing lost, nothing twice. Those
  held ones teach no speed on the retry, as a batch whose answer was lost never did (its history is
  whole; the learned speed, an average, misses that part of one batch).
- *The answer is the batch's.* ``stored`` joins the chunks' stored reports in batch order (what the
  endpoint counts as ``accepted`` and the speed learner observes), ``repeated`` sums theirs, and
  ``length`` is the stream's length after the last chunk.

On Redis Cluster nothing changes: every chunk touches the same two keys, which share a slot.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, cast

from predictors.featurenames import without_refused
from predictors.tracetable import Trace
from scheduler.trace import TraceRow
from service.api.learning_schemas import ActualReport
from service.delivery import keys
from service.delivery.views import text
from service.learning.actuals_entry import UNREADABLE, entry_row
from service.learning.actuals_page import page_trace
from service.learning.shared_texts import SharedTexts
from service.redis_conn import RedisClient

_log = logging.getLogger("service.actuals")
PAGE = 10_000  # entries per XRANGE while reading the history
# The skipped entries a read of the whole stream names in its one line (``ActualsLog._tell``): enough
# to find a foreign writer's first few by hand, never a line as long as the stream
SKIPPED_NAMED = 8
Skipped = list[tuple[str, str]]  # the entries a read skipped: id, why
# Reports per append script call, so how long one call holds Redis: new reports cost ~7-12 us of
# server time each (valkey, 100,000 in one call: 0.75-1.5 s), so a chunk ~7-12 ms (a few ms when
# all are held already); 100 chunks add 100 round trips and per-call work, ~0.3-0.6 s on a
# 100,000-report batch (2.3 s -> 2.6-2.9 s wall on a 2-core dev box, half of it digests and JSON).
CHUNK = 1_000

# Appends the reports not stored yet, atomically (replicas may race on one retried batch).
# KEYS: the stream, its seen-digests zset (same slot). ARGV: maxlen, then per report its digest, its
# legacy digest ("" when the same: no schedule id) and its JSON; only the digest is recorded.
# A digest's score is its entry's ordinal (the stream's entries-added, Redis 7+): the stream holds
# the ordinals from added - XLEN + 1 on (nothing deletes single entries), so the zset is trimmed to
# exactly the reports it holds. (Entry ids will not do: a script's XADDs share one millisecond.)
# Returns {stream length, one char per report: "1" stored now, "0" held already}.
_APPEND = """
local stream, seen, maxlen = KEYS[1], KEYS[2], ARGV[1]
local added = 0
if redis.call('EXISTS', stream) == 1 then
  local info = redis.call('XINFO', 'STREAM', stream)
  for i = 1, #info, 2 do
    if info[i] == 'entries-added' then added = info[i + 1] end
  end
else
  redis.call('DEL', seen)  -- no stream (never written, or deleted): it holds no report
end
local flags = {}
for i = 2, #ARGV, 3 do
  local legacy = ARGV[i + 1]
  if redis.call('ZSCORE', seen, ARGV[i]) or (legacy ~= '' and redis.call('ZSCORE', seen, legacy)) then
    flags[#flags + 1] = '0'
  else
    redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*', 'a', ARGV[i + 2])
    added = added + 1
    redis.call('ZADD', seen, added, ARGV[i])
    flags[#flags + 1] = '1'
  end
end
local length = redis.call('XLEN', stream)
redis.call('ZREMRANGEBYSCORE', seen, '-inf', '(' .. (added - length + 1))
return {length, table.concat(flags)}
"""


@dataclass(frozen=True, slots=True)
class Appended:
    """What one append stored."""

    stored: list[ActualReport]  # reports new to the stream, in order (stored now)
    repeated: int  # reports the stream already held (or that repeat an earlier one of the batch)
    length: int  # the stream's length afterwards


def report_digest(report: ActualReport) -> str:
    """What identifies a report: a digest of every field but ``schedule_id`` (key order aside), so a
    resend is known whether or not it names the schedule that ran it (why: module doc)."""
    return report_digests(report)[0]


def report_digests(report: ActualReport) -> tuple[str, str]:
    """``report_digest``, and the digest releases before 2026-12-05 recorded (every field,
    ``schedule_id`` too), or "" where the two are one (no schedule id), so a retry whose first
    attempt an older replica stored is still found (needed only the minutes of a roll).

    The older digest's text is the newer's with ``"schedule_id"`` put in its sorted place, just
    before the top-level ``"step"`` (no top-level key sorts between them): its last ``,"step":``,
    since an earlier one can only be a feature's name (a text value's quotes are escaped) and the
    keys after it (wall time, worker id) hold no such text. Spliced, not dumped twice: the sorted
    dump is most of a digest's cost: a second one added ~60% to the digests of 100,000 reports,
    the splice ~25%."""
    fields = report.model_dump(mode="json", exclude_none=True, exclude={"schedule_id"})
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    if report.schedule_id is None:
        return _hash(canonical), ""
    at = canonical.rindex(',"step":')
    legacy = f'{canonical[:at]},"schedule_id":{json.dumps(report.schedule_id)}{canonical[at:]}'
    return _hash(canonical), _hash(legacy)


def _hash(canonical: str) -> str:
    """The digest of a report's canonical JSON text (sorted keys, no spaces)."""
    return hashlib.blake2b(canonical.encode(), digest_size=16).hexdigest()


START = "0-0"  # the stream id before every entry
Entry = tuple[str, dict[str, str]]  # one stream entry as XRANGE answers it: id, fields


class Folded(NamedTuple):
    """What ``ActualsLog.rows_after`` read: rows (as columns, ``service.learning.actuals_page``), the
    id to continue from, whether the stream lost what was read before (the rows are then its whole
    content, to replace what was held), and the schedule each row's report named (None: none), in
    the rows' order: ``service.learning.step_over`` tells by them whether the last step is over."""

    rows: Trace
    cursor: str
    restarted: bool
    schedules: list[str | None]


class ActualsLog:
    """Append reports to, and page through, the actuals stream."""

    def __init__(
        self,
        client: RedisClient,
        maxlen: int,
        prefix: str = keys.DEFAULT_PREFIX,
        chunk: int = CHUNK,
    ) -> None:
        self._redis = client
        self.maxlen = maxlen  # the stream's approximate cap; replicas hold exactly this much history
        self.key = keys.actuals_stream(prefix)
        self.seen_key = keys.actuals_seen(prefix)
        self.chunk = chunk  # reports per script call: how long one call holds Redis
        self._append = client.register_script(_APPEND)
        self._texts = SharedTexts()  # one object per distinct prompt id across every page read
        # told how many entries a read skipped (``rollout_actuals_skipped_total``): each is logged,
        # but a foreign writer's entries are a rate an operator alerts on, not a line to spot
        self.skipped: Callable[[int], None] | None = None

    def append(self, reports: Sequence[ActualReport]) -> Appended:
        """Store the reports the stream does not hold yet, ``chunk`` at a time, each chunk atomic
        (why that keeps each report stored once, and what a failure part-way leaves: module doc)."""
        stored: list[ActualReport] = []
        length = 0
        for start in range(0, max(len(reports), 1), self.chunk):
            part = reports[start : start + self.chunk]
            stored_now, length = self._append_chunk(part)
            stored += stored_now
        return Appended(stored=stored, repeated=len(reports) - len(stored), length=length)

    def _append_chunk(self, reports: Sequence[ActualReport]) -> tuple[list[ActualReport], int]:
        """One script call: the reports of ``reports`` it stored, in order, and the stream's length."""
        args: list[str | int] = [self.maxlen]
        for report in reports:
            args += [*report_digests(report), report.model_dump_json(exclude_none=True)]
        length, flags = cast(list[object], self._append(keys=[self.key, self.seen_key], args=args))
        stored = [report for report, flag in zip(reports, text(flags), strict=True) if flag == "1"]
        return stored, int(str(length))

    def length(self) -> int:
        """Reports currently held."""
        return int(self._redis.xlen(self.key))

    def newest_id(self) -> str:
        """The stream's newest entry id (``START`` when it holds none): one short read, so a replica
        tells whether actuals arrived without reading them (``service.learning.follower``)."""
        newest = cast(list[Entry], self._redis.xrevrange(self.key, max="+", min="-", count=1))
        return newest[0][0] if newest else START

    def rows_after(self, cursor: str) -> Folded:
        """Reports appended after stream id ``cursor``, as trace rows, and the id to continue from.

        The entry at ``cursor`` is read too (inclusive ``XRANGE``, no extra round trip): when the
        stream no longer holds it, what was read before is gone from Redis (a restart without its
        AOF, a flush, a failover to a replica behind; trimming never takes the newest entry read
        unless a whole cap of newer ones arrived), and the rows returned are the stream's whole
        content, ``restarted`` set, so the caller holds what Redis holds rather than rows it lost.

        The entries it skips are counted (``skipped``) and said (``_tell``)."""
        skipped: Skipped = []
        folded = self._read(cursor, skipped)
        self._tell(skipped, whole=cursor == START or folded.restarted)
        return folded._replace(rows=self._without_refused(folded.rows))

    def _without_refused(self, rows: Trace) -> Trace:
        """``rows`` without the features a report may no longer carry (``predictors.featurenames``: a
        trace column's name, or another tool's name for one), said in one line naming them and how
        many rows held them. Releases before 2026-12-07 stored such reports, and the stream keeps
        them until its cap trims them: read back, they were trained on, a model fitted on features
        no request can send (the output length itself as ``completion_tokens``). The rows stay."""
        kept, names, held = without_refused(rows)
        if names:
            _log.warning(
                "left out features named as trace columns (or another tool's name for one) from %d "
                "stored actuals rows: %s; the API refuses such names since 2026-12-07, and the rows "
                "are kept without them",
                held,
                ", ".join(map(repr, names)),
                extra={"rows": held, "features": names},
            )
        return kept

    def _read(self, cursor: str, skipped: Skipped) -> Folded:
        """``rows_after``'s read; the entries it skips are added to ``skipped``."""
        if cursor == START:
            return self._pages(START, False, skipped)
        head = self._page(cursor, inclusive=True)  # the entry at cursor, then up to PAGE - 1 newer
        if not head or head[0][0] != cursor:
            return self._pages(START, True, skipped)
        rows, schedules = self._rows(head[1:], skipped)
        if len(head) < PAGE:
            return Folded(rows, head[-1][0], False, schedules)
        more = self._pages(head[-1][0], False, skipped)  # more after this page
        return Folded(Trace.concat([rows, more.rows]), more.cursor, False, schedules + more.schedules)

    def _tell(self, skipped: Skipped, whole: bool) -> None:
        """Count the entries a read skipped, and say them: each in a line of its own where the read
        took only what was new (a sync, the follower's tick), so a writer that starts writing what
        the history cannot hold is seen at its first entry; all in one line where it read the whole
        stream (a replica's start, or the history reloaded after Redis lost it), naming the first
        ``SKIPPED_NAMED``. An entry stays in the stream until trimmed or deleted, and a warning
        for each old one at every start, the same lines each time, hid a new one among them."""
        if not skipped:
            return
        if self.skipped is not None:
            self.skipped(len(skipped))
        if not whole:
            for entry_id, why in skipped:
                _log.warning("skipping unreadable actuals entry %s: %s", entry_id, why)
            return
        named = ", ".join(entry_id for entry_id, _ in skipped[:SKIPPED_NAMED])
        more = len(skipped) - SKIPPED_NAMED
        _log.warning(
            "skipping %d unreadable actuals entries the stream holds: %s%s (the first: %s); XDEL them "
            "once looked at",
            len(skipped),
            named,
            f" and {more} more" if more > 0 else "",
            skipped[0][1],
            extra={"skipped": len(skipped)},
        )

    def _pages(self, cursor: str, restarted: bool, skipped: Skipped) -> Folded:
        """Every entry after ``cursor``, page by page, as rows, and the last id read."""
        rows: list[Trace] = []
        schedules: list[str | None] = []
        while True:
            page = self._page(cursor)
            page_rows, page_schedules = self._rows(page, skipped)
            rows.append(page_rows)
            schedules += page_schedules
            if page:
                cursor = page[-1][0]
            if len(page) < PAGE:
                return Folded(Trace.concat(rows), cursor, restarted, schedules)

    def _page(self, cursor: str, inclusive: bool = False) -> list[Entry]:
        """Up to ``PAGE`` entries after ``cursor`` (from it, when ``inclusive``)."""
        low = cursor if inclusive else f"({cursor}"
        return cast(list[Entry], self._redis.xrange(self.key, min=low, max="+", count=PAGE))

    def _rows(self, page: list[Entry], skipped: Skipped) -> tuple[Trace, list[str | None]]:
        """The entries of ``page`` that read as reports, as trace rows, and the schedule each named:
        all at once where every entry is as the service writes it (``actuals_page``), else entry by
        entry (``actuals_entry``: what does not read is skipped, added to ``skipped`` with why)."""
        values = [fields.get("a", "") for _, fields in page]
        plain = page_trace(values, self._texts)
        if plain is not None:
            return plain
        read: list[tuple[TraceRow, str | None]] = []
        for (entry_id, _), raw in zip(page, values, strict=True):
            try:
                read.append(entry_row(raw, self._texts))
            except UNREADABLE as error:  # written by something else
                skipped.append((entry_id, str(error)))
        return Trace.from_rows(row for row, _ in read), [schedule for _, schedule in read]

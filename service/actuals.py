"""Actuals: what each trajectory really produced, stored durably for retraining and speed learning.

Workers (or the trainer, through the client) report finished trajectories. Reports append to one
Redis stream, so they survive a service restart (and a Redis restart with AOF), replicas share them,
and retraining reads them in order, in pages, without holding them all in the service's memory.

Key: ``keys.actuals_stream`` (``<prefix>:actuals``, a stream; each entry one field ``a`` = the
report's JSON; every key and TTL is documented in ``service/delivery/keys.py``). It is capped
approximately at ``Settings.actuals_maxlen`` entries (oldest trimmed, ``XADD MAXLEN ~``); it does not
expire, because the history is what the predictor learns from.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import cast

from scheduler.trace import TraceRow
from service.api.schemas import MAX_COUNT, ActualReport
from service.delivery import keys
from service.redis_conn import RedisClient

_log = logging.getLogger("service.actuals")
PAGE = 10_000  # entries per XRANGE while reading the history


class ActualsLog:
    """Append reports to, and page through, the actuals stream."""

    def __init__(self, client: RedisClient, maxlen: int, prefix: str = keys.DEFAULT_PREFIX) -> None:
        self._redis = client
        self.maxlen = maxlen  # the stream's approximate cap; replicas hold no more history than it
        self.key = keys.actuals_stream(prefix)

    def append(self, reports: Sequence[ActualReport]) -> int:
        """Store ``reports`` in one round trip; returns the stream length afterwards."""
        pipe = self._redis.pipeline(transaction=True)
        for report in reports:
            pipe.xadd(
                self.key,
                {"a": report.model_dump_json(exclude_none=True)},
                maxlen=self.maxlen,
                approximate=True,
            )
        pipe.xlen(self.key)
        return int(pipe.execute()[-1])

    def length(self) -> int:
        """Reports currently held."""
        return int(self._redis.xlen(self.key))

    def rows_after(self, cursor: str) -> tuple[list[TraceRow], str]:
        """Reports appended after stream id ``cursor``, as trace rows, and the id to continue from."""
        rows: list[TraceRow] = []
        while True:
            page = cast(
                list[tuple[str, dict[str, str]]],
                self._redis.xrange(self.key, min=f"({cursor}", max="+", count=PAGE),
            )
            rows += [row for _, fields in page if (row := _row(fields.get("a", ""))) is not None]
            if page:
                cursor = page[-1][0]
            if len(page) < PAGE:
                return rows, cursor


def _row(raw: str) -> TraceRow | None:
    """One stored report as a trace row; JSON is parsed directly (it was validated when stored),
    which reads a 2M-entry history at startup ~10x faster than re-validating every report.

    An entry that no longer reads (written by something else, or stored before the API bounded its
    counts) is skipped with a warning: failing on it would fail every later read of the history,
    and so every replica's start-up, until someone deleted it by hand."""
    try:
        doc = json.loads(raw)
        return TraceRow(
            step=_count(doc["step"]),
            prompt_id=str(doc["prompt_id"]),
            sample_idx=_count(doc["sample_idx"]),
            prompt_tokens=_count(doc["prompt_tokens"]),
            output_tokens=_count(doc["output_tokens"]),
            max_new_tokens=None if doc.get("max_new_tokens") is None else _count(doc["max_new_tokens"]),
            finish_reason=doc.get("finish_reason"),
            reward=doc.get("reward"),
            features=doc.get("features", {}),
        )
    except (ValueError, KeyError, TypeError) as error:  # written by something else: skip, say so
        _log.warning("skipping unreadable actuals entry: %s", error)
        return None


def _count(value: object) -> int:
    """A stored count as an int, refused (``ValueError``) outside what the API accepts."""
    number = int(str(value))  # str: refuses 2.5 and true, which int() would take
    if not 0 <= number <= MAX_COUNT:
        raise ValueError(f"count {number} is outside [0, {MAX_COUNT}]")
    return number

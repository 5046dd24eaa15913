"""What a schedule's readers see: progress counts, dead letters, and the settings sidecars read.

The read side's vocabulary (``DeliveryViews``), apart from ``records``, which holds what is
written and leased: the trainer polls ``Progress``, a sidecar reads ``ScheduleInfo`` before it
claims.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from service.delivery.keys import CANCELLED, DONE, FAILED, QUEUED, RUNNING, count_field


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """An item given up on, reported by progress."""

    key: str  # trajectory key
    worker_id: str  # last holder
    attempts: int  # leases it consumed
    reason: str  # why it died
    at_ms: int  # server-clock ms of death

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> DeadLetter:
        """Rebuild a dead letter from the JSON the scripts push onto the dead list."""
        return cls(
            key=str(doc["key"]),
            worker_id=str(doc["worker"]),
            attempts=int(doc["attempts"]),
            reason=str(doc["reason"]),
            at_ms=int(doc["at_ms"]),
        )


@dataclass(frozen=True, slots=True)
class StoredRequest:
    """What a publish stored of the request that published the schedule (``DeliveryViews.stored_request``)."""

    digest: str | None  # of the request's work (``P:meta`` ``request``); None: not stored (older release)
    answer: str | None  # the service's answer to it (``P:answer``), as it encoded it; None: not stored
    cancelled: bool  # the trainer cancelled the schedule
    # no schedule, but a DELETE withdrew the id before it was published (``P:withdrawn``): a publish
    # under it is refused, so a retry is refused before it plans
    withdrawn: bool = False


@dataclass(frozen=True, slots=True)
class CutShort:
    """A schedule the trainer cancelled while some of its trajectories were unfinished."""

    schedule_id: str
    cancelled: int  # trajectories the cancel ended (queued or running then)
    total: int  # trajectories the step published


@dataclass(frozen=True, slots=True)
class StepsChecked:
    """What ``Delivery.check_steps`` found of the schedules a ``POST /actuals`` batch names."""

    cut_short: list[CutShort]  # cancelled with trajectories unfinished, in the order asked
    # whose keys are gone (retention passed) or never were (never published): a step cut short and a
    # whole one look alike then, so their completeness is unknown; in the order asked
    unchecked: list[str]


@dataclass(frozen=True, slots=True)
class WorkerProgress:
    """Counts for one worker: queued in its queue, running under its leases, done/failed by it,
    and cancelled (queued there or running on it when the schedule was cancelled)."""

    queued: int
    running: int
    done: int
    failed: int
    cancelled: int = 0


def per_worker(counts: Mapping[str, int]) -> dict[str, WorkerProgress]:
    """Per-worker progress from the ``<state>:<worker>`` counter fields (state ``q r d f``)."""
    workers = sorted({f.split(":", 1)[1] for f in counts if ":" in f})
    return {
        w: WorkerProgress(
            queued=counts.get(count_field(QUEUED, w), 0),
            running=counts.get(count_field(RUNNING, w), 0),
            done=counts.get(count_field(DONE, w), 0),
            failed=counts.get(count_field(FAILED, w), 0),
            cancelled=counts.get(count_field(CANCELLED, w), 0),
        )
        for w in workers
    }


@dataclass(frozen=True, slots=True)
class Progress:
    """A consistent snapshot of one schedule (read in one MULTI, so counts always sum to total)."""

    schedule_id: str
    total: int  # items published
    queued: int  # in some queue (including the shared FIFO)
    running: int  # under a lease
    done: int  # accepted exactly once
    failed: int  # dead-lettered
    workers: Mapping[str, WorkerProgress]  # per worker id (the shared FIFO appears as "*")
    dead_letters: tuple[DeadLetter, ...]  # in order of death
    kv_admission: bool  # the plan asks sidecars to admit by reserved KV
    cancelled: int = 0  # queued or running when the trainer cancelled the schedule (``Delivery.cancel``)
    cancelled_at_ms: int | None = None  # when it was cancelled (lease clock); None: not cancelled
    published_ms: int | None = None  # when it was published (lease clock, ms)
    now_ms: int | None = None  # the lease clock when this snapshot was read
    # what the plan predicts, seconds after publication; None / absent: published by a release that
    # did not store it (or the plan did not know)
    predicted_makespan_s: float | None = None
    planned_finish_s: Mapping[str, float] = field(default_factory=dict)
    # the engine whose rules the plan was made for (``keys.ENGINE``); None: published by a release
    # that did not store it, whose plan's engine is unknown here (no default is assumed for it)
    engine: str | None = None

    @property
    def finished(self) -> bool:
        """Every item is done, dead-lettered or cancelled: nothing more will happen to it."""
        return self.done + self.failed + self.cancelled >= self.total

    @property
    def elapsed_s(self) -> float | None:
        """Seconds since the publish on the lease clock (it keeps counting once the step is over)."""
        if self.published_ms is None or self.now_ms is None:
            return None
        return max(0, self.now_ms - self.published_ms) / 1000.0


def seconds_or_none(raw: Any) -> float | None:
    """A stored time in seconds; None when absent or not a finite number >= 0 (written by another
    tool): the progress route must answer with what it can, never fail on an annotation."""
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and value >= 0 else None


def planned_finishes(raw: Any) -> dict[str, float]:
    """``P:meta`` ``planned_finish`` (JSON worker -> seconds) as a dict; {} when absent or unreadable."""
    try:
        doc = json.loads(raw) if raw is not None else {}
    except ValueError:
        return {}
    if not isinstance(doc, dict):
        return {}
    finishes = {str(w): seconds_or_none(s) for w, s in doc.items()}
    return {w: s for w, s in finishes.items() if s is not None}


@dataclass(frozen=True, slots=True)
class ScheduleInfo:
    """A schedule's settings, as a sidecar needs them before claiming."""

    schedule_id: str
    workers: tuple[str, ...]  # workers with a queue in this schedule
    total: int  # items published
    kv_admission: bool  # admit by KV reserved at predicted final length
    lease_ttl_ms: int  # heartbeat well within this (e.g. every third of it)
    max_attempts: int  # leases per item before dead-lettering
    published_ms: int  # server-clock ms of the publish
    drained: tuple[str, ...] = ()  # workers of the request's that take nothing (not announced)

"""Delivery of published schedules through Redis: leases, fencing, stealing, reaping, results.

``Delivery`` (protocol.py) is the API, with its plain reads in views.py and the indexes that announce
a schedule (and tell reapers which schedules are due) in indexes.py; keys.py documents every key and
TTL; records.py holds the dataclasses written and leased, outcomes.py what each operation answers,
progress.py what the readers see; lua/ holds one atomic script per
operation, and wire.py lays out their arguments; publisher.py turns a plan into a published
schedule; reaper.py runs the reaper loop. See docs/delivery.md for the state machine and guarantees.
"""

from service.delivery.errors import (
    InvalidInputError,
    LateMarkError,
    ScheduleConflictError,
    ScheduleWithdrawnError,
    UnknownScheduleError,
)
from service.delivery.outcomes import (
    CancelReport,
    CompletionOutcome,
    PublishOutcome,
    ReapReport,
    ReleaseOutcome,
)
from service.delivery.progress import DeadLetter, Progress, ScheduleInfo, WorkerProgress
from service.delivery.protocol import Delivery
from service.delivery.records import (
    DeliveryItem,
    Lease,
    LeaseSettings,
    PublishedSchedule,
    ResultRecord,
    TrajectoryResult,
)

__all__ = [
    "CancelReport",
    "CompletionOutcome",
    "DeadLetter",
    "Delivery",
    "DeliveryItem",
    "InvalidInputError",
    "LateMarkError",
    "Lease",
    "LeaseSettings",
    "Progress",
    "PublishOutcome",
    "PublishedSchedule",
    "ReapReport",
    "ReleaseOutcome",
    "ResultRecord",
    "ScheduleConflictError",
    "ScheduleInfo",
    "ScheduleWithdrawnError",
    "TrajectoryResult",
    "UnknownScheduleError",
    "WorkerProgress",
]

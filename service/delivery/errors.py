"""Errors of the delivery protocol, typed so the HTTP layer maps them to problem responses."""

from __future__ import annotations

from scheduler.errors import InvalidInputError, SchedulerError

__all__ = ["InvalidInputError", "ScheduleConflictError", "ScheduleWithdrawnError", "UnknownScheduleError"]


class UnknownScheduleError(SchedulerError, LookupError):
    """The schedule id was never published here, or its keys expired (retention passed)."""

    def __init__(self, schedule_id: str) -> None:
        self.schedule_id = schedule_id
        super().__init__(f"schedule_id={schedule_id!r}: unknown or expired schedule")


class ScheduleConflictError(SchedulerError):
    """A publish reused a schedule id that already holds a different schedule; nothing was written."""

    def __init__(self, schedule_id: str) -> None:
        self.schedule_id = schedule_id
        super().__init__(f"schedule_id={schedule_id!r}: already published with different content")


class ScheduleWithdrawnError(SchedulerError):
    """A publish under an id that a DELETE met before it was published (``P:withdrawn``): the trainer
    gave the step up while this request planned it; nothing was written."""

    def __init__(self, schedule_id: str) -> None:
        self.schedule_id = schedule_id
        super().__init__(f"schedule_id={schedule_id!r}: cancelled before it was published")

"""Typed errors of the planning core.

Every rejection names the offending field and value so that the service can map it to a 422 problem
response (and the CLI to a one-line message) without string parsing.
"""

from __future__ import annotations

import sys


class SchedulerError(Exception):
    """Base class of every error the core raises on purpose."""


class InvalidInputError(SchedulerError, ValueError):
    """An input violates the domain's rules; ``field`` locates it and ``value`` shows it."""

    def __init__(self, field: str, value: object, reason: str) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        super().__init__(f"{field}={value!r}: {reason}")

    def __reduce__(self) -> tuple[type[InvalidInputError], tuple[object, ...]]:
        """Pickle by the constructor's arguments: the replay's worker processes send errors back."""
        return type(self), (self.field, self.value, self.reason)


class UnknownNameError(InvalidInputError):
    """A name (device kind, model preset, policy) that is not registered."""

    def __init__(self, field: str, value: str, known: list[str]) -> None:
        self.known = sorted(known)
        super().__init__(field, value, f"unknown; expected one of {', '.join(self.known)}")

    def __reduce__(self) -> tuple[type[InvalidInputError], tuple[object, ...]]:
        """Pickle by the constructor's arguments (see ``InvalidInputError.__reduce__``)."""
        return type(self), (self.field, self.value, self.known)


class DeadlinePassedError(SchedulerError):
    """The caller's hard deadline (``PlanRequest.hard_deadline``) passed while the plan was at
    ``stage``: the planner gives up rather than finish a plan nobody will read (``scheduler.giveup``).

    ``deadline`` is the hard deadline on ``time.perf_counter``'s clock; ``late_s`` how far past it
    the planner was when it looked. Not an ``InvalidInputError``: the request was valid, the host was
    too slow for it, and the service answers 504 deadline-exceeded, not 422.
    """

    def __init__(self, stage: str, deadline: float, late_s: float) -> None:
        self.stage = stage
        self.deadline = deadline
        self.late_s = late_s
        super().__init__(
            f"hard deadline {_shown(deadline)} passed in {stage} ({late_s * 1e3:.1f} ms past it)"
        )

    def __reduce__(self) -> tuple[type[DeadlinePassedError], tuple[object, ...]]:
        """Pickle by the constructor's arguments (see ``InvalidInputError.__reduce__``)."""
        return type(self), (self.stage, self.deadline, self.late_s)


def _shown(deadline: float) -> str:
    """The deadline as a message shows it: 'none' for a plan that had none (the service's ``NEVER``,
    ``sys.float_info.max``, given up because the replica stopped), which ``.6f`` printed as a
    316-character number in every such traceback."""
    return "none" if deadline >= sys.float_info.max else f"{deadline:.6f}"

"""Typed errors of the planning core.

Every rejection names the offending field and value so that the service can map it to a 422 problem
response (and the CLI to a one-line message) without string parsing.
"""

from __future__ import annotations


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

"""What each delivery operation answers: a completion's, a release's and a publish's outcome, and the
reports of a reaper pass and of a cancel.

Apart from ``records`` (the items, leases and results that travel through Redis): these are the
protocol's replies to its callers, never stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class CompletionOutcome(StrEnum):
    """What ``complete`` did with a result."""

    ACCEPTED = "accepted"  # first completion with the current token: appended to the results stream
    DUPLICATE = "duplicate"  # repeat of the accepted completion (e.g. a lost reply): success, no-op
    STALE = "stale"  # the lease was reaped, stolen back or expired: result discarded


class ReleaseOutcome(StrEnum):
    """What ``release``/``fail`` did with one lease."""

    REQUEUED = "requeued"  # back at the head of a queue: the holder's (a release), another's (a failure)
    DEAD_LETTERED = "dead_lettered"  # attempts spent: moved to the dead-letter list
    DUPLICATE = "duplicate"  # this token's failure, or hand-back that requeued, was taken already (a repeat)
    STALE = "stale"  # not held any more: nothing changed


class PublishOutcome(StrEnum):
    """What ``publish`` did."""

    CREATED = "created"  # the schedule was written now
    UNCHANGED = "unchanged"  # an identical publish had already happened: nothing written


@dataclass(frozen=True, slots=True)
class ReapReport:
    """What one reaper pass did to one schedule."""

    requeued: int  # expired leases put back at the head of a queue
    dead_lettered: int  # expired leases whose item ran out of attempts
    workers: tuple[str, ...] = ()  # whose leases lapsed (each once, sorted): workers that went silent
    quiet_until_ms: int = 0  # lease clock: none of the schedule's leases has lapsed by then (reapers skip it)


@dataclass(frozen=True, slots=True)
class ResetReport:
    """What handing back one worker's leases of an earlier process did in one schedule."""

    released: int  # current leases put back at the head of the worker's queue, attempt refunded
    requeued_lapsed: int  # leases that had lapsed already: requeued as the reaper would (attempt spent)
    dead_lettered: int  # lapsed leases, or current ones past their refunds, whose item ran out of attempts
    charged: int = 0  # current leases past their item's refunds (``RESET_REFUNDS``): requeued, attempt spent

    @property
    def handed_back(self) -> int:
        """Every lease the reset ended."""
        return self.released + self.requeued_lapsed + self.dead_lettered + self.charged


@dataclass(frozen=True, slots=True)
class CancelReport:
    """What cancelling a schedule ended; a repeated cancel answers the first one's report."""

    queued: int  # items taken off the queues unstarted
    running: int  # leases ended: their heartbeats and completions are refused from now on
    cancelled_at_ms: int  # when the first cancel ran (lease clock, ms); withdrawn: server time
    withdrawn: bool = False  # nothing was published yet: the id was withdrawn while in flight

    @property
    def cancelled(self) -> int:
        """Every item the cancel ended."""
        return self.queued + self.running

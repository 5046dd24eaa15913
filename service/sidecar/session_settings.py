"""What configures one worker session (``SessionSettings``) and what it counts (``SessionStats``).

Plain data, apart from ``session.py`` so that module reads as the protocol steps a worker takes; both
are re-exported there, where the runner, the pull API, the metrics and the tests import them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SessionSettings:
    """Timing of one worker session."""

    worker_id: str  # this worker's id, as the plan names it
    steal: bool = True  # take work from the busiest queue when the own queue is empty
    reap_when_idle: bool = True  # expire lapsed leases of a schedule this worker finds empty
    heartbeat_interval_s: float | None = None  # None: a third of the shortest held lease TTL
    retry_for_s: float = 60.0  # how long to retry a completion/release through Redis outages


@dataclass
class SessionStats:
    """Counters a sidecar reports (and the fault tests read)."""

    claimed: int = 0  # leases taken from the own queue (or the shared FIFO)
    stolen: int = 0  # leases taken from another worker's queue
    accepted: int = 0  # completions accepted
    duplicate: int = 0  # completions answered as a repeat of an accepted one
    stale: int = 0  # completions or failure reports refused: the lease was gone
    failed: int = 0  # items reported failed to the protocol and requeued or dead-lettered by it
    released: int = 0  # leases handed back unstarted or unfinished (shutdown)
    lost: int = 0  # leases a heartbeat found gone; pull mode: an overdue item's failure report not taken
    reaped: int = 0  # lapsed leases this worker's reaps requeued or dead-lettered
    reset: int = 0  # leases an earlier process of this worker id held, handed back at start
    cancelled: int = 0  # leases stopped, completions or failure reports refused: the schedule was cancelled

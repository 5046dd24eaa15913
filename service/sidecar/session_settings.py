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
    # None: a third of the shortest held lease TTL; one not shorter than that TTL is not kept to
    # (``heartbeat_every_s``)
    heartbeat_interval_s: float | None = None
    retry_for_s: float = 60.0  # how long to retry a completion/release through Redis outages


def heartbeat_every_s(configured_s: float | None, lease_ttls_ms: list[int]) -> tuple[float, str | None]:
    """Seconds between heartbeats, and the warning to log once when ``configured_s`` is not kept to.

    Default: a third of the shortest lease TTL among ``lease_ttls_ms`` (1 s while none is known).
    ``--heartbeat-interval`` overrides it, except when it is not shorter than that TTL: every lease
    would then lapse between two heartbeats, its item run again elsewhere and its attempts spent
    while the engine was still on it. The two settings cannot be checked together when either is
    set: the TTL is the service's (``ROLLOUT_LEASE_TTL_MS``), carried by each schedule it publishes,
    so the sidecar learns it only from the schedules it meets. It heartbeats at the default then."""
    shortest_ms = min(lease_ttls_ms, default=None)
    default_s = 1.0 if shortest_ms is None else shortest_ms / 3000
    if configured_s is None:
        return default_s, None
    if shortest_ms is None or configured_s * 1000 < shortest_ms:
        return configured_s, None
    return default_s, (
        f"--heartbeat-interval={configured_s:g}s is not shorter than the lease TTL of a schedule held "
        f"(ROLLOUT_LEASE_TTL_MS={shortest_ms}): every lease would lapse between two heartbeats; "
        f"heartbeating every {default_s:g}s (a third of the TTL) instead"
    )


@dataclass
class SessionStats:
    """Counters a sidecar reports (and the fault tests read)."""

    claimed: int = 0  # leases taken from the own queue (or the shared FIFO)
    stolen: int = 0  # leases taken from another worker's queue
    accepted: int = 0  # completions accepted
    duplicate: int = 0  # completions of a lease held here answered as a repeat of an accepted one
    stale: int = 0  # completions or failure reports of a lease held here refused: the lease was gone
    failed: int = 0  # items reported failed to the protocol and requeued or dead-lettered by it
    released: int = 0  # leases handed back unstarted or unfinished (shutdown)
    lost: int = 0  # leases a heartbeat or hand-back found gone (not cancelled, or the shutdown cut the
    # question); a failure report (an unreadable item's at its claim, a push item's, an overdue pull
    # item's the shutdown came before), a hand-back, or a push completion still unanswered at exit or
    # past its bound (``resends.py``), that Redis did not answer or a shutdown came before (they lapse)
    reaped: int = 0  # lapsed leases this worker's reaps requeued or dead-lettered
    reset: int = 0  # leases an earlier process of this worker id held, handed back at start
    cancelled: int = 0  # items whose lease was stopped or report refused: schedule cancelled (once each)
    # pull mode: completions accepted (counted ``accepted`` too) and failures taken (``failed`` too) of
    # leases this process never held: an earlier process of this worker id handed them out and its
    # worker outlived it; claimed + stolen + inherited balances what ended here
    inherited: int = 0

"""How a sidecar's leases ended, as its counters tell it: what the report, resend and counters tests
assert, so each states one dict of ends rather than seven counters one by one."""

from __future__ import annotations

from service.sidecar.session_settings import SessionStats

# Every way a lease the sidecar took can end, each a ``SessionStats`` counter: they sum to what it took
ENDS = ("accepted", "duplicate", "stale", "failed", "released", "lost", "cancelled")


def ends_of(stats: SessionStats) -> dict[str, int]:
    """Each way the leases ended so far that counted at least once (zeros left out, so an assertion
    names only what happened)."""
    return {name: getattr(stats, name) for name in ENDS if getattr(stats, name)}

"""Handing back many leases in one call: each lease answered in its own slot of the reply (linear)."""

from __future__ import annotations

from service.delivery import Delivery, Lease, ReleaseOutcome
from tests.service.delivery.conftest import schedule

T0 = 1_000_000
N = 5_000  # a large pull fleet's /reset, or a sidecar's shutdown holding a whole schedule
# (20,000 timed out a fresh-clone CI at load 45: redis-py 8 reads with a 5 s socket timeout by
# default, and one 20,000-lease call ran past it; the slots' order is the same at any size)


def _claimed(delivery: Delivery, schedule_id: str) -> list[Lease]:
    """Every item of a fresh ``N``-item schedule, leased to worker ``a``: a publish that left one out
    of the queue (its pushes go in chunks of 4,000 keys) fails here, rather than claiming for ever."""
    delivery.publish(schedule(schedule_id, {"a": N}, ttl_ms=600_000), now_ms=T0)
    leases: list[Lease] = []
    while len(leases) < N:
        batch = delivery.claim(schedule_id, "a", 1000, now_ms=T0)
        assert batch, f"only {len(leases)} of the {N} items published could be claimed"
        leases += batch
    return leases


def test_one_release_of_many_leases_answers_each_lease_in_its_own_slot(delivery: Delivery) -> None:
    """release.lua put each code at the front of its reply (table.insert(out, 1, ...)), moving every
    code after it: O(n^2), 20,000 leases ~1.6 s in one call against ~0.25 s in calls of 500
    (docs/experiments.md, "Delivery protocol review", leftdelivery; a speed is a benchmark's to
    measure, not a test's). Now each code is written to its lease's slot: one release of ``N``
    leases, every seventh of them already released (a repeat of those: duplicate, cluster54),
    answers each in its own place, and the
    released ones are back at the queue's head in the plan's order."""
    leases = _claimed(delivery, "whole")
    before = leases[::7]
    assert set(delivery.release(before, now_ms=T0 + 1)) == {ReleaseOutcome.REQUEUED}
    before_keys = {lease.key for lease in before}
    outcomes = delivery.release(leases, now_ms=T0 + 1)
    expected = [
        ReleaseOutcome.DUPLICATE if lease.key in before_keys else ReleaseOutcome.REQUEUED for lease in leases
    ]
    assert outcomes == expected
    head = [le.key for le in delivery.claim("whole", "a", 3, now_ms=T0 + 2)]
    assert head == ["a-1#0", "a-2#0", "a-3#0"]  # this release's first three, ahead of those before

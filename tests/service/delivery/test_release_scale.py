"""Handing back many leases at once costs what handing them back in batches does: linear, not quadratic."""

from __future__ import annotations

import time

from service.delivery import Delivery, Lease, ReleaseOutcome
from tests.service.delivery.conftest import schedule

T0 = 1_000_000
N = 20_000  # a large pull fleet's /reset, or a sidecar's shutdown holding a whole schedule
BATCH = 500


def _claimed(delivery: Delivery, schedule_id: str) -> list[Lease]:
    """Every item of a fresh ``N``-item schedule, leased to worker ``a``."""
    delivery.publish(schedule(schedule_id, {"a": N}, ttl_ms=600_000), now_ms=T0)
    leases: list[Lease] = []
    while len(leases) < N:
        leases += delivery.claim(schedule_id, "a", 1000, now_ms=T0)
    return leases


def _timed_release(delivery: Delivery, batches: list[list[Lease]]) -> float:
    start = time.perf_counter()
    for batch in batches:
        assert set(delivery.release(batch, now_ms=T0 + 1)) == {ReleaseOutcome.REQUEUED}
    return time.perf_counter() - start


def test_one_release_of_many_leases_costs_about_what_as_many_in_batches_cost(delivery: Delivery) -> None:
    """release.lua put each code at the front of its reply (table.insert(out, 1, ...)), moving every
    code after it: 20,000 leases took ~2 s in one call against ~0.3 s in batches of 500."""
    whole = _claimed(delivery, "whole")
    batched = _claimed(delivery, "batched")
    at_once = _timed_release(delivery, [whole])
    in_batches = _timed_release(delivery, [batched[i : i + BATCH] for i in range(0, N, BATCH)])
    assert at_once < 2.5 * in_batches, f"{at_once:.3f} s at once, {in_batches:.3f} s in batches"
    assert [le.key for le in delivery.claim("whole", "a", 3, now_ms=T0 + 2)] == ["a-0#0", "a-1#0", "a-2#0"]

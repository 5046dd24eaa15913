"""A long-lived sidecar's memory of cancelled schedules stays bounded: it sees thousands of schedules
over a training run, and each cancelled one it remembers holds the keys of the items it counted."""

from __future__ import annotations

from service.sidecar.cancels import CANCELLED_KEPT, Cancels

SCHEDULES = 5_000  # a long run's steps, each cancelled with items on this worker


def test_only_the_newest_cancelled_schedules_are_remembered_however_many_were_cancelled() -> None:
    cancels = Cancels()
    for n in range(SCHEDULES):
        assert cancels.count(f"s{n}", [f"k{i}" for i in range(8)]) == 8
    remembered = [n for n in range(SCHEDULES) if f"s{n}" in cancels]
    assert remembered == list(range(SCHEDULES - CANCELLED_KEPT, SCHEDULES))


def test_a_forgotten_schedule_found_again_is_counted_afresh_within_the_bound() -> None:
    cancels = Cancels()
    for n in range(CANCELLED_KEPT + 1):
        cancels.count(f"s{n}", ["k0", "k1"])
    assert "s0" not in cancels
    assert cancels.count("s0", ["k0", "k1"]) == 2  # a fresh count, not refused as counted
    assert cancels.count("s0", ["k0", "k1"]) == 0  # and counted once from then on
    assert sum(f"s{n}" in cancels for n in range(CANCELLED_KEPT + 1)) == CANCELLED_KEPT

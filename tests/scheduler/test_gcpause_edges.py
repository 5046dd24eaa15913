"""The full collection a pause runs (``gcpause.MAX_PENDING``) stands in for the generation thresholds
of an enabled collector that overlapping pauses hold off, and for nothing else. A caller that
disabled the collector keeps it off: overlapping pauses never collect where it was off before the
first of them began (a process that turned it off, a benchmark or an embedding application, asked
for no collection at all). And the last pause to end, which enables the collector again, leaves the
collection to its thresholds: it runs no full scan (~50 ms at the largest heaps) on the request's
thread of its own."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

from scheduler import gcpause
from scheduler.gcpause import collector_paused
from tests.scheduler.cycles import Cycle


@contextlib.contextmanager
def _collections(enabled: bool) -> Iterator[list[int]]:
    """The generation of each collection that starts in the block, the collector enabled (or not)
    as it begins; enabled again, and everything collected, after it."""
    collections: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.collect()
    if not enabled:
        gc.disable()
    gc.callbacks.append(count)
    try:
        yield collections
    finally:
        gc.callbacks.remove(count)
        gc.enable()
        gc.collect()


def test_overlapping_pauses_under_a_collector_the_caller_disabled_never_collect() -> None:
    with _collections(enabled=False) as collections:
        with collector_paused():  # one plan always running ...
            litter = [Cycle() for _ in range(gcpause.MAX_PENDING)]
            del litter  # past the bound: a collector enabled before would collect now
            with collector_paused():  # ... and one ends above it
                pass
        seen, still_off = list(collections), not gc.isenabled()
    assert (seen, still_off) == ([], True)


def test_the_last_pause_to_end_enables_the_collector_and_runs_no_full_collection_of_its_own() -> None:
    with _collections(enabled=True) as collections:
        with collector_paused():  # a lone pause, past the bound as it ends
            litter = [Cycle() for _ in range(gcpause.MAX_PENDING)]
            del litter
        at_its_end, enabled = list(collections), gc.isenabled()
    assert (2 in at_its_end, enabled) == (False, True)

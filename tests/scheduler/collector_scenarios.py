"""The collector-pause scenarios whose outcome is read from the process's cycle collector.

Each runs in a fresh interpreter (``tests.fresh_interpreter``): they count the collections that start
and compare ``gc.get_count()`` against ``gcpause.MAX_PENDING``, and in a test worker any other live
thread's allocations, frees and collections land in the same counts. Each returns what the tests in
``test_gcpause.py`` and ``test_gcpause_edges.py`` assert on, as JSON-ready values.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

from scheduler import gcpause
from scheduler.gcpause import collector_paused
from tests.scheduler.cycles import Cycle


@contextlib.contextmanager
def collections_seen(enabled: bool = True) -> Iterator[list[int]]:
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


def overlapping_pauses() -> tuple[list[int], list[int], bool, int]:
    """One pause always running; another ends below ``MAX_PENDING`` uncollected objects, a third
    above it. Returns the collections seen after the second, after the third, whether the collector
    was still held after the third, and how many of the litter's cycles were still alive."""
    with collections_seen() as collections:
        with collector_paused():  # one plan always running ...
            with collector_paused():  # ... another ends below the bound: no collection
                Cycle()
            before = list(collections)
            litter = [Cycle() for _ in range(gcpause.MAX_PENDING)]
            del litter  # the list is freed; its cycles wait for the collector
            with collector_paused():  # ... and one ends above it
                pass
            held = not gc.isenabled()
            alive = sum(isinstance(o, Cycle) for o in gc.get_objects())
        return before, list(collections), held, alive


def overlapping_pauses_under_a_disabled_collector() -> tuple[list[int], bool]:
    """The caller disabled the collector; overlapping pauses end above the bound. Returns the
    collections seen and whether the collector was still off after the pauses."""
    with collections_seen(enabled=False) as collections:
        with collector_paused():  # one plan always running ...
            litter = [Cycle() for _ in range(gcpause.MAX_PENDING)]
            del litter  # past the bound: a collector enabled before would collect now
            with collector_paused():  # ... and one ends above it
                pass
        return list(collections), not gc.isenabled()


def a_lone_pause_past_the_bound() -> tuple[list[int], bool]:
    """A lone pause ends past the bound. Returns the collections seen as it ended and whether the
    collector was enabled again."""
    with collections_seen() as collections:
        with collector_paused():  # a lone pause, past the bound as it ends
            litter = [Cycle() for _ in range(gcpause.MAX_PENDING)]
            del litter
        return list(collections), gc.isenabled()

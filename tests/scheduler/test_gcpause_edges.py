"""The full collection a pause runs (``gcpause.MAX_PENDING``) stands in for the generation thresholds
of an enabled collector that overlapping pauses hold off, and for nothing else. A caller that
disabled the collector keeps it off: overlapping pauses never collect where it was off before the
first of them began (a process that turned it off, a benchmark or an embedding application, asked
for no collection at all). And the last pause to end, which enables the collector again, leaves the
collection to its thresholds: it runs no full scan (~50 ms at the largest heaps) on the request's
thread of its own. Each scenario runs in a fresh interpreter (``tests.fresh_interpreter``): the
collections counted are the whole process's."""

from __future__ import annotations

from tests.fresh_interpreter import in_fresh_interpreter
from tests.scheduler.collector_scenarios import (
    a_lone_pause_past_the_bound,
    overlapping_pauses_under_a_disabled_collector,
)


def test_overlapping_pauses_under_a_collector_the_caller_disabled_never_collect() -> None:
    seen, still_off = in_fresh_interpreter(overlapping_pauses_under_a_disabled_collector)
    assert (seen, still_off) == ([], True)


def test_the_last_pause_to_end_enables_the_collector_and_runs_no_full_collection_of_its_own() -> None:
    at_its_end, enabled = in_fresh_interpreter(a_lone_pause_past_the_bound)
    assert (2 in at_its_end, enabled) == (False, True)

"""Holding the cycle collector during preparation leaves it as it was, whatever happens inside, and
whatever other threads pause it meanwhile (the service plans on several at once)."""

from __future__ import annotations

import dataclasses
import gc
import threading

import pytest

from scheduler import gcpause
from scheduler.benchgen import bench_request
from scheduler.errors import InvalidInputError
from scheduler.gcpause import collector_paused
from scheduler.policies.problem import build_problem
from scheduler.validation import validate_request
from tests.fresh_interpreter import in_fresh_interpreter
from tests.scheduler.collector_scenarios import overlapping_pauses


def test_the_collector_is_held_inside_and_enabled_again_after() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_disabled_by_the_caller_stays_disabled() -> None:
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_rejected_request_leaves_the_collector_enabled() -> None:
    request = dataclasses.replace(bench_request(64, 4, 0), time_budget_s=float("nan"))
    with pytest.raises(InvalidInputError):
        validate_request(request)
    assert gc.isenabled()
    build_problem(bench_request(64, 4, 0))
    assert gc.isenabled()


WAIT_S = 60.0  # a bound against never for the threads' meetings; met at once when right


def test_a_pause_ending_while_another_thread_s_runs_leaves_the_collector_held_until_that_one_ends() -> None:
    """Two plans overlap: the first to end enabled the collector under the other, still planning."""
    inside, first_ended = threading.Event(), threading.Event()
    held_after_first: list[bool] = []

    def second_plan() -> None:
        with collector_paused():
            inside.set()
            first_ended.wait(WAIT_S)
            held_after_first.append(not gc.isenabled())

    second = threading.Thread(target=second_plan)
    try:
        with collector_paused():
            second.start()
            assert inside.wait(WAIT_S)
        first_ended.set()
        second.join(WAIT_S)
        assert held_after_first == [True]
        assert gc.isenabled()
    finally:
        gc.enable()


class _SlowToDisable:
    """The ``gc`` module as ``collector_paused`` sees it, but a thread named ``late`` that reads the
    collector's state waits, having read it, until ``go_on`` is set (another thread runs meanwhile)."""

    def __init__(self, arrived: threading.Event) -> None:
        self.arrived = arrived
        self.go_on = threading.Event()

    def isenabled(self) -> bool:
        enabled = gc.isenabled()
        if threading.current_thread().name == "late":
            self.arrived.set()
            self.go_on.wait(WAIT_S)
        return enabled

    def disable(self) -> None:
        gc.disable()

    def enable(self) -> None:
        gc.enable()

    def get_count(self) -> tuple[int, int, int]:
        return gc.get_count()

    def collect(self) -> int:
        return gc.collect()


def test_a_pause_that_begins_as_another_ends_never_leaves_the_collector_disabled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A second plan read the state (disabled, by the first) just before the first ended and enabled
    the collector; it then disabled it, and on its way out restored what it had read: disabled, for
    the rest of the process. Now the second reads nothing while the first holds the pause."""
    arrived = threading.Event()  # the late plan read the state, or is inside its pause
    collector = _SlowToDisable(arrived)
    monkeypatch.setattr(gcpause, "gc", collector)

    def late_plan() -> None:
        with collector_paused():
            arrived.set()
            collector.go_on.wait(WAIT_S)

    late = threading.Thread(target=late_plan, name="late")
    try:
        with collector_paused():
            late.start()
            assert arrived.wait(WAIT_S)
        collector.go_on.set()
        late.join(WAIT_S)
        assert not late.is_alive()
        assert gc.isenabled()
    finally:
        gc.enable()


def test_pauses_that_overlap_without_a_gap_still_collect_once_enough_is_left_uncollected() -> None:
    """Plans overlapping without end (a busy replica's slots) held the collector for good: the count
    never fell to zero. Now a pause that ends under another, once ``MAX_PENDING`` objects are left
    uncollected, runs one full collection (the cycles made meanwhile are freed), while the pause still
    running keeps the collector disabled; below that, none. Read in a fresh interpreter: the
    collector's counts are the whole process's (``tests.fresh_interpreter``)."""
    before, collections, held, alive = in_fresh_interpreter(overlapping_pauses)
    assert (before, collections) == ([], [2])
    assert held
    assert alive == 0

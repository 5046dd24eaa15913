"""A lower bound that reaches its tail limit (d) past its deadlines builds nothing no probe will read,
and reports what the refused probes would have: the limits it proved before, to the bit.

Why. ``prepare`` hands the bound two deadlines (``BOUND_SHARE``, ``FLUID_SHARE`` of what validation and
the problem left of the budget: ``planner.bound_deadlines``), and ``tailbound.Timed`` refuses every
probe past them; but the set-up before the first probe (each kind's limits, the fluid rows, a cover a
search) ran whatever the clock said. On a loaded host ``prepare``
reached the bound past its shares, or was descheduled in the set-up until past them, and the bound
then spent several ms of wall on set-up no probe read (docs/experiments.md, sched53).
"""

from __future__ import annotations

import pytest

from scheduler import clock, lowerbound, tailbound
from scheduler.benchgen import bench_request
from scheduler.lowerbound import LowerBound, lower_bound
from tests.scheduler.fake_clock import ManualClock, count_calls, slow_stage

REQUEST = bench_request(1_024, 16, 0)


def _proven_before_the_tail(bound: LowerBound) -> float:
    return max(bound.longest_s, bound.throughput_s, bound.kv_s)


def test_a_bound_past_both_deadlines_before_its_tail_builds_none_of_its_set_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = ManualClock()
    monkeypatch.setattr(clock, "now", fake.now)
    fake.seconds = 10.0
    limits = count_calls(monkeypatch, tailbound, "kind_limits")
    rows = count_calls(monkeypatch, tailbound, "_FluidRows")
    bound = lower_bound(REQUEST.trajectories, REQUEST.inventory, deadline=1.0, fluid_deadline=2.0)
    assert (limits, rows) == ([], [])
    assert bound.tail_s == bound.value_s == _proven_before_the_tail(bound)


def test_a_bound_descheduled_in_its_set_up_until_past_both_deadlines_builds_no_fluid_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = slow_stage(monkeypatch, tailbound, "kind_limits", 1.0)  # a second a kind or family
    rows = count_calls(monkeypatch, tailbound, "_FluidRows")
    bound = lower_bound(REQUEST.trajectories, REQUEST.inventory, deadline=0.5, fluid_deadline=1.5)
    assert fake.seconds > 1.5  # past both deadlines within the set-up
    assert rows == []
    assert bound.tail_s == bound.value_s == _proven_before_the_tail(bound)


def test_a_bound_descheduled_in_building_its_fluid_rows_until_past_both_deadlines_starts_no_search(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    searches = count_calls(monkeypatch, tailbound._FluidRows, "gap")
    fake = slow_stage(monkeypatch, tailbound, "_FluidRows", 1.0)  # (the class's gap counted above)
    bound = lower_bound(REQUEST.trajectories, REQUEST.inventory, deadline=0.5, fluid_deadline=0.8)
    assert fake.seconds > 0.8  # the limits built in time, past both once the rows were
    assert searches == []  # each would have summed its demand for probes all refused
    assert bound.tail_s == bound.value_s == _proven_before_the_tail(bound)


def test_searches_whose_probes_are_all_refused_build_no_cover(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = ManualClock()
    monkeypatch.setattr(clock, "now", fake.now)
    fake.seconds = 10.0
    covers = count_calls(monkeypatch, tailbound, "FluidCover")
    rows = count_calls(monkeypatch, tailbound, "_FluidRows")
    # the band check has no deadline, so the set-up runs; the fluid searches' probes are all refused
    bound = lower_bound(REQUEST.trajectories, REQUEST.inventory, deadline=None, fluid_deadline=2.0)
    assert (len(rows), covers) == (1, [])
    assert bound.value_s >= _proven_before_the_tail(bound)


def test_a_bound_within_its_deadlines_is_the_complete_bound() -> None:
    with clock.frozen():  # the clock never moves: no deadline passes
        within = lower_bound(REQUEST.trajectories, REQUEST.inventory, deadline=0.01, fluid_deadline=0.02)
    assert within == lowerbound.lower_bound(REQUEST.trajectories, REQUEST.inventory)
    assert within.tail_s > _proven_before_the_tail(within)

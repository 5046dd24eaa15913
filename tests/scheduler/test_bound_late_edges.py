"""A lower bound gives up its set-up only where every probe would be refused: past both of its
deadlines, not at them, and not past the band's alone while the fluid search still has time.

Why. ``tailbound.Late`` returns the limits proven before the tail (``known_s``) where the probes
would all have been refused anyway (``Timed``: a probe is refused once its start plus the longest
probe so far is past its deadline, so the first is refused only past it), so that the bound is the
same, only sooner. Late any earlier, the bound is looser than the probes would have proven: a
fluid search with time left, or a clock standing at the deadline, proves more than ``known_s``.
"""

from __future__ import annotations

import pytest

from scheduler import clock
from scheduler.benchgen import bench_request
from scheduler.lowerbound import LowerBound, lower_bound
from tests.scheduler.fake_clock import ManualClock

REQUEST = bench_request(1_024, 16, 0)


def _proven_before_the_tail(bound: LowerBound) -> float:
    return max(bound.longest_s, bound.throughput_s, bound.kv_s)


def _at(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """The planning clock standing at ``seconds``: every probe takes no time on it."""
    fake = ManualClock()
    fake.seconds = seconds
    monkeypatch.setattr(clock, "now", fake.now)


def test_a_bound_past_its_band_deadline_but_within_its_fluid_one_still_runs_its_fluid_search(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _at(monkeypatch, 1.0)
    within_the_fluid = lower_bound(REQUEST.trajectories, REQUEST.inventory, deadline=0.5, fluid_deadline=1.5)
    fluid_untimed = lower_bound(REQUEST.trajectories, REQUEST.inventory, deadline=0.5, fluid_deadline=None)
    assert within_the_fluid == fluid_untimed
    assert within_the_fluid.tail_s > _proven_before_the_tail(within_the_fluid)


def test_a_bound_whose_clock_stands_at_its_deadlines_not_past_them_is_the_complete_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    complete = lower_bound(REQUEST.trajectories, REQUEST.inventory)
    _at(monkeypatch, 2.0)
    at_them = lower_bound(REQUEST.trajectories, REQUEST.inventory, deadline=2.0, fluid_deadline=2.0)
    assert at_them == complete
    assert at_them.tail_s > _proven_before_the_tail(at_them)

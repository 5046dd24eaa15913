"""The bound's shares of the budget are of what validation and the problem left of it, counted from
when they end: a loaded host that stretches validation's wall time no longer takes the bound's share
alone (``planner.bound_deadlines``; docs/experiments.md, sched54). Neither deadline is later than
the moment that leaves the policy's floor (``FLOOR_RATIO`` times what validation and the problem took)
the rest of the budget: where the plan overruns whatever the bound does, the bound adds none of its
share to the overrun (sched55).

Every test plans on a fake clock (``tests.scheduler.fake_clock``) on which only validation takes time;
the bound runs inside ``clock.frozen()`` as well, so its CP-SAT probes stop on their deterministic
limits and never on the wall clock."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler import clock, lowerbound, planner
from scheduler.benchgen import bench_request
from tests.scheduler.fake_clock import slow_stage

REQUEST = bench_request(1_024, 16, 0, time_budget_s=0.08)


def _deadlines_seen(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, float]]:
    """The (deadline, fluid_deadline) ``prepare`` hands the bound, each call; the bound itself runs."""
    seen: list[tuple[float, float]] = []
    original = lowerbound.lower_bound

    def bound(*args: Any, **kwargs: Any) -> Any:
        seen.append((kwargs["deadline"], kwargs["fluid_deadline"]))
        with clock.frozen():  # probes on their deterministic limits; the fake clock still reads
            return original(*args, **kwargs)

    monkeypatch.setattr(planner, "lower_bound", bound)
    return seen


def test_validation_that_took_5_ms_of_80_leaves_the_bound_its_shares_of_the_75_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The floor's 10 ms fit well after both shares end (23.75 and 42.5 ms): they stand, and the
    bound's probes within them reach the complete bound (the clock moving nowhere else)."""
    seen = _deadlines_seen(monkeypatch)
    with clock.frozen():
        whole = planner.prepare(REQUEST).bound.value_s
    slow_stage(monkeypatch, planner, "validate_request", 0.005)
    prepared = planner.prepare(REQUEST)
    assert seen[-1] == pytest.approx((0.005 + 0.25 * 0.075, 0.005 + 0.5 * 0.075))
    assert prepared.bound.value_s == whole


def test_validation_that_took_20_ms_of_80_ends_the_fluid_search_where_the_floor_s_40_ms_begin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The probes' share ends at 35 ms, before the floor's 40 ms; the fluid share's 50 ms would not
    leave the policy its floor, so the fluid search stops at 40 ms."""
    seen = _deadlines_seen(monkeypatch)
    slow_stage(monkeypatch, planner, "validate_request", 0.02)
    planner.prepare(REQUEST)
    assert seen == [pytest.approx((0.02 + 0.25 * 0.06, 0.08 - 2.0 * 0.02))]


def test_validation_that_took_60_ms_of_80_leaves_the_bound_no_time_the_floor_needs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The floor (120 ms) no longer fits in the 20 ms left: the plan overruns whatever the bound
    does, so both deadlines are the moment the problem was built, as past the whole budget, where
    the shares of what was left (65 and 70 ms) had added up to 10 ms to the overrun."""
    seen = _deadlines_seen(monkeypatch)
    slow_stage(monkeypatch, planner, "validate_request", 0.06)
    planner.prepare(REQUEST)
    assert seen == [(0.06, 0.06)]


def test_validation_past_the_whole_budget_gives_the_bound_no_time_beyond_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nothing is left: both deadlines are the moment the problem was built, so the first moment
    the bound's clock moves it is past both (``tailbound.Late``), as it was with the old shares."""
    seen = _deadlines_seen(monkeypatch)
    slow_stage(monkeypatch, planner, "validate_request", 0.09)
    planner.prepare(REQUEST)
    assert seen == [(0.09, 0.09)]


def test_where_validation_takes_no_time_the_shares_are_of_the_whole_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = _deadlines_seen(monkeypatch)
    slow_stage(monkeypatch, planner, "validate_request", 0.0)
    planner.prepare(REQUEST)
    assert seen == [(0.25 * 0.08, 0.5 * 0.08)]


def test_the_floor_is_of_the_time_validation_took_not_of_the_clocks_reading(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``scheduler.clock`` is monotonic, read from an arbitrary origin (a host's uptime): 20 ms of
    validation on a clock that read 1,000 s at the start give the deadlines they give at 0."""
    seen = _deadlines_seen(monkeypatch)
    slow_stage(monkeypatch, planner, "validate_request", 0.02).seconds = 1_000.0
    planner.prepare(REQUEST)
    assert seen == [pytest.approx((1_000.0 + 0.02 + 0.25 * 0.06, 1_000.0 + 0.08 - 2.0 * 0.02))]

"""The bound's shares of the budget are of what validation and the problem left of it, counted from
when they end: a loaded host that stretches validation's wall time no longer takes the bound's share
alone (``planner.bound_deadlines``; docs/experiments.md, sched54).

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


def test_validation_that_took_60_ms_of_80_leaves_the_bound_its_shares_of_the_20_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """From the preparation's start, the shares ended at 20 and 40 ms: both passed before the bound
    began, and it reported its limits (a)-(c) alone, 0 of 20 ms of it spent."""
    seen = _deadlines_seen(monkeypatch)
    with clock.frozen():
        whole = planner.prepare(REQUEST).bound.value_s
    slow_stage(monkeypatch, planner, "validate_request", 0.06)
    prepared = planner.prepare(REQUEST)
    assert seen[-1] == pytest.approx((0.06 + 0.25 * 0.02, 0.06 + 0.5 * 0.02))
    assert prepared.bound.value_s == whole  # probes within its share, nothing else taking time


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

"""``scheduler.giveup``'s edges: the hard deadline reached to the instant is passed, and a context that
names no deadline keeps the one it runs in (a plan inside the caller's ``prepare``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from scheduler import clock, giveup, planner, tailbound
from scheduler.errors import DeadlinePassedError
from scheduler.policies import blindbar, get_policy
from scheduler.policies.base import Placement, Policy
from scheduler.policies.problem import Problem
from scheduler.types import PlanRequest
from tests.scheduler.fake_clock import count_calls
from tests.scheduler.mixed_requests import mixed_request

DEADLINE = 100.0  # the caller's, on the test's wall clock


def test_a_wall_that_reads_the_deadline_itself_has_passed_it() -> None:
    with (
        giveup.reading(lambda: DEADLINE),
        giveup.giving_up_at(DEADLINE),
        pytest.raises(DeadlinePassedError) as raised,
    ):
        giveup.check()
    assert raised.value.late_s == 0.0


def test_a_wall_a_hair_before_the_deadline_has_not_passed_it() -> None:
    with giveup.reading(lambda: DEADLINE - 1e-6), giveup.giving_up_at(DEADLINE):
        giveup.check()


def test_an_inner_context_without_a_deadline_keeps_the_outer_one_in_force() -> None:
    with (
        giveup.reading(lambda: DEADLINE + 1.0),
        giveup.giving_up_at(DEADLINE),
        giveup.giving_up_at(None),
        pytest.raises(DeadlinePassedError) as raised,
        giveup.stage("inner"),
    ):
        giveup.check()
    assert (raised.value.stage, raised.value.deadline) == ("inner", DEADLINE)


def test_a_check_at_a_named_stage_names_it_whatever_stage_it_runs_in() -> None:
    with (
        giveup.reading(lambda: DEADLINE + 1.0),
        giveup.giving_up_at(DEADLINE),
        pytest.raises(DeadlinePassedError) as raised,
        giveup.stage("inner"),
    ):
        giveup.check_at("publish")
    assert (raised.value.stage, raised.value.deadline, raised.value.late_s) == ("publish", DEADLINE, 1.0)


def test_a_check_at_a_named_stage_before_the_deadline_or_without_one_gives_nothing_up() -> None:
    with giveup.reading(lambda: DEADLINE + 1.0):
        giveup.check_at("publish")  # no deadline in force
        with giveup.reading(lambda: DEADLINE - 1e-6), giveup.giving_up_at(DEADLINE):
            giveup.check_at("publish")


def test_outside_every_deadline_context_a_late_wall_gives_nothing_up() -> None:
    with giveup.reading(lambda: DEADLINE + 1.0):
        with giveup.giving_up_at(DEADLINE), pytest.raises(DeadlinePassedError):
            giveup.check()
        giveup.check()  # the deadline's context ended: none is in force


def test_a_hard_deadline_given_in_whole_seconds_is_one() -> None:
    request = dataclasses.replace(mixed_request(None, 16), hard_deadline=int(DEADLINE))
    # Frozen: given up at validation, before any budget is spent (tests/scope_costs.py, OFF_THE_CLOCK).
    with clock.frozen(), giveup.reading(lambda: DEADLINE + 1.0), pytest.raises(DeadlinePassedError) as raised:
        planner.plan(request, "lpt")
    assert (raised.value.stage, raised.value.deadline) == ("validation", DEADLINE)


class _LateAtTheEnd:
    """A policy whose placement is made in time, the wall then past the deadline (``wall[0]``)."""

    name = "late-at-the-end"

    def __init__(self, policy: Policy, wall: list[float]) -> None:
        self.policy, self.wall = policy, wall

    def plan(self, request: PlanRequest, problem: Problem | None = None) -> Placement:
        placement = self.policy.plan(request, problem)
        self.wall[0] = DEADLINE + 1.0
        return placement


def test_a_deadline_that_passes_as_the_placement_ends_is_given_up_in_the_report(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wall = [DEADLINE - 10.0]
    lpt = get_policy("lpt")
    monkeypatch.setattr(planner, "get_policy", lambda name: _LateAtTheEnd(lpt, wall))
    with clock.frozen(), giveup.reading(lambda: wall[0]), pytest.raises(DeadlinePassedError) as raised:
        planner.plan(mixed_request(DEADLINE, 16), "lpt")
    assert raised.value.stage == "report"


def test_the_blind_plans_check_between_the_candidates_they_build(monkeypatch: pytest.MonkeyPatch) -> None:
    wall = [DEADLINE - 10.0]
    floors = count_calls(monkeypatch, blindbar, "_floor")
    with clock.frozen(), giveup.reading(lambda: wall[0]):
        planner.plan(mixed_request(DEADLINE), "lpt")
        assert floors  # the bar builds candidates for this batch, each priced by its floor first
        floors.clear()
        candidates = blindbar._candidates

        def late_once_one_is_built(*args: Any, **kwargs: Any) -> Iterator[Any]:
            for queues in candidates(*args, **kwargs):
                wall[0] = DEADLINE + 1.0
                yield queues

        monkeypatch.setattr(blindbar, "_candidates", late_once_one_is_built)
        with pytest.raises(DeadlinePassedError, match="blind plans"):
            planner.plan(mixed_request(DEADLINE), "lpt")
    assert not floors  # given up at the candidate the deadline passed in, not after every one


def test_a_bounds_probe_is_not_started_past_the_hard_deadline() -> None:
    probed: list[float] = []
    timed = tailbound.Timed(None)  # no budget's deadline: only the caller's stops it
    with giveup.reading(lambda: DEADLINE), giveup.giving_up_at(DEADLINE), pytest.raises(DeadlinePassedError):
        timed(probed.append, 1.0)
    assert probed == []

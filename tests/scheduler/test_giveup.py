"""A plan gives up at the caller's hard deadline, in whichever stage it passes, and names it.

The hard deadline is read on a wall clock the test moves (``giveup.reading``); the budget on a frozen
planning clock, so every stage runs as on an idle host and only the hard deadline can stop it.
"""

from __future__ import annotations

import dataclasses
import math
import pickle
from collections.abc import Iterator, Mapping
from types import ModuleType

import pytest

from scheduler import clock, giveup, planner
from scheduler.benchgen import bench_request
from scheduler.errors import DeadlinePassedError, InvalidInputError
from scheduler.policies import bandsearch, lpt, ordering, robust
from scheduler.types import PlanRequest
from tests.scheduler.fake_clock import count_calls
from tests.scheduler.jumping_wall import DEADLINE, JumpingWall
from tests.scheduler.mixed_requests import decisions, mixed_request


def _request(hard_deadline: float | None = DEADLINE, slots: int = 256) -> PlanRequest:
    """``mixed_request`` under the caller's hard deadline ``DEADLINE`` unless told otherwise."""
    return mixed_request(hard_deadline, slots)


@pytest.mark.parametrize(
    ("module", "name", "stage"),
    [
        (planner, "validate_request", "validation"),
        (planner, "lower_bound", "bound"),
        (lpt, "spreads", "spreads"),
        (lpt, "lpt_assignment", "lpt start"),
        (lpt, "drawn_blind_plan", "blind plans"),  # with quantiles: built for the bar (review50a)
        (lpt, "hedged", "hedge"),
        (lpt, "calibrated", "placing again"),
        (lpt, "at_once_judged", "at-once hedge"),
        (lpt, "barred", "bar"),
    ],
)
def test_lpt_gives_up_in_the_stage_where_the_hard_deadline_passed_naming_it_and_the_deadline(
    monkeypatch: pytest.MonkeyPatch, wall: JumpingWall, module: ModuleType, name: str, stage: str
) -> None:
    wall.jump_in(monkeypatch, module, name)
    with pytest.raises(DeadlinePassedError) as raised:
        planner.plan(_request(), "lpt")
    assert (raised.value.stage, raised.value.deadline) == (stage, DEADLINE)
    assert raised.value.late_s == pytest.approx(0.25)
    assert stage in str(raised.value)


def test_cpsat_gives_up_inside_its_search_where_the_deadline_passed_in_a_round(
    monkeypatch: pytest.MonkeyPatch, wall: JumpingWall
) -> None:
    wall.jump_in(monkeypatch, bandsearch, "rounds")
    with pytest.raises(DeadlinePassedError) as raised:
        planner.plan(_request(), "cpsat")
    assert raised.value.stage == "search"


def test_the_orderings_of_the_lpt_start_check_between_the_queues_they_play(
    monkeypatch: pytest.MonkeyPatch, wall: JumpingWall
) -> None:
    played = count_calls(monkeypatch, ordering, "_ordered")
    planner.plan(_request(None, slots=16), "lpt")
    assert played  # these queues run in waves, and each is played
    played.clear()
    wall.jump_in(monkeypatch, lpt, "ordered")  # the deadline passes as the lpt start's ordering begins
    with pytest.raises(DeadlinePassedError, match="lpt start"):
        planner.plan(_request(slots=16), "lpt")
    assert not played


@pytest.mark.parametrize("workers", [4, 16])  # the general list scheduling, and plain LPT's own loop
def test_the_lpt_placement_checks_between_the_units_it_places(
    monkeypatch: pytest.MonkeyPatch, wall: JumpingWall, workers: int
) -> None:
    request = dataclasses.replace(bench_request(1_024, workers, seed=0), hard_deadline=DEADLINE)
    ordered = count_calls(monkeypatch, lpt, "ordered")
    wall.jump_in(monkeypatch, lpt, "lpt_assignment")  # the deadline passes as the placement begins
    with pytest.raises(DeadlinePassedError, match="lpt start"):
        planner.plan(request, "lpt")
    assert not ordered  # the placement stopped before the plays that follow it


class _Noted(Mapping[float, float]):
    """A trajectory's quantiles that note each read of its median on ``read`` and move the wall past
    the hard deadline as they do: the deadline passes while the spreads read."""

    def __init__(self, quantiles: Mapping[float, float], read: list[int], wall: JumpingWall) -> None:
        self.quantiles, self.read, self.wall = dict(quantiles), read, wall

    def __getitem__(self, level: float) -> float:
        if level == 0.5:
            self.read.append(1)
            self.wall.seconds = self.wall.after
        return self.quantiles[level]

    def __iter__(self) -> Iterator[float]:
        return iter(self.quantiles)

    def __len__(self) -> int:
        return len(self.quantiles)


def test_the_quantiles_spreads_check_between_the_trajectories_they_read(wall: JumpingWall) -> None:
    read: list[int] = []
    batch = [  # 2,048 with quantiles, the deadline passing at the first median read
        dataclasses.replace(t, quantiles=_Noted(t.quantiles, read, wall)) for t in _request().trajectories * 8
    ]
    with giveup.giving_up_at(DEADLINE), pytest.raises(DeadlinePassedError):
        robust.spreads(batch)
    assert len(read) == robust.GIVE_UP_EVERY  # stopped at the next check, not at the 2,048th


def test_a_shared_preparation_gives_up_in_the_plan_after_it(
    monkeypatch: pytest.MonkeyPatch, wall: JumpingWall
) -> None:
    request = _request()
    prepared = planner.prepare(request)
    wall.jump_in(monkeypatch, lpt, "lpt_assignment")
    with pytest.raises(DeadlinePassedError, match="lpt start"):
        planner.plan(request, "cpsat", prepared=prepared)


@pytest.mark.parametrize("policy", ["lpt", "cpsat"])
def test_without_a_hard_deadline_the_plan_is_the_same_however_late_the_wall_reads(
    monkeypatch: pytest.MonkeyPatch, wall: JumpingWall, policy: str
) -> None:
    before = planner.plan(_request(None), policy)
    wall.jump_in(monkeypatch, planner, "lower_bound")
    assert decisions(planner.plan(_request(None), policy)) == decisions(before)


@pytest.mark.parametrize("policy", ["lpt", "cpsat"])
def test_a_hard_deadline_that_does_not_pass_leaves_the_plan_as_it_was(wall: JumpingWall, policy: str) -> None:
    assert decisions(planner.plan(_request(), policy)) == decisions(planner.plan(_request(None), policy))


def test_the_error_crosses_a_process_boundary_whole() -> None:
    error = pickle.loads(pickle.dumps(DeadlinePassedError("bound", DEADLINE, 0.5)))
    assert (error.stage, error.deadline, error.late_s) == ("bound", DEADLINE, 0.5)


@pytest.mark.parametrize("bad", [math.nan, math.inf, "soon", True])
def test_a_hard_deadline_that_is_not_a_finite_number_is_refused_naming_the_field(bad: object) -> None:
    request = dataclasses.replace(_request(), hard_deadline=bad)  # type: ignore[arg-type]
    # Frozen: a refusal is made before any budget is spent (tests/scope_costs.py, OFF_THE_CLOCK).
    with clock.frozen(), pytest.raises(InvalidInputError) as raised:
        planner.plan(request, "lpt")
    assert raised.value.field == "hard_deadline"

"""The preparation's long passes over the batch check the caller's hard deadline inside them.

Validation, the problem's arrays and the bound's limits are each one or more passes over every
trajectory, and were checked only at their stage's end: at 16,384 x 128 beside 2 CPU burners the
give-up came up to 20 ms (problem) and 38 ms (bound) past the deadline (docs/experiments.md,
deadline48). Here the wall jumps past the deadline inside a pass, and the work after it must not run.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from scheduler import clock, giveup, lowerbound, planner, tailbands, validation
from scheduler.benchgen import bench_request
from scheduler.errors import DeadlinePassedError, InvalidInputError
from scheduler.policies import lpt, ordering, problem
from scheduler.policies.problem import build_problem
from scheduler.types import PlanRequest
from tests.scheduler.fake_clock import count_calls
from tests.scheduler.jumping_wall import DEADLINE, JumpingWall


def _request() -> PlanRequest:
    """4,096 trajectories: two of validation's checked slices."""
    request = bench_request(4_096, 32, seed=0)
    assert len(request.trajectories) > validation.GIVE_UP_EVERY
    return dataclasses.replace(request, hard_deadline=DEADLINE)


def _gives_up_in(stage: str) -> None:
    with pytest.raises(DeadlinePassedError) as raised:
        planner.prepare(_request())
    assert raised.value.stage == stage


def test_validation_gives_up_between_its_slices_of_the_batch_before_reading_the_rest(
    monkeypatch: pytest.MonkeyPatch, wall: JumpingWall
) -> None:
    read = count_calls(monkeypatch, validation, "_plain_run")
    keys = count_calls(monkeypatch, validation, "_validate_unique_keys")
    wall.jump_in(monkeypatch, validation, "_plain_run")  # the deadline passes in the first slice
    _gives_up_in("validation")
    assert (len(read), keys) == (1, [])  # one slice read; the key check after the run never ran


def test_the_problem_gives_up_after_its_columns_before_building_the_units(
    monkeypatch: pytest.MonkeyPatch, wall: JumpingWall
) -> None:
    units = count_calls(monkeypatch, problem, "_single_units")
    wall.jump_in(monkeypatch, problem, "trajectory_columns")
    _gives_up_in("problem")
    assert not units


def test_the_bound_gives_up_after_its_first_limit_before_the_tail_cover(
    monkeypatch: pytest.MonkeyPatch, wall: JumpingWall
) -> None:
    tail = count_calls(monkeypatch, lowerbound, "tail_bound")
    wall.jump_in(monkeypatch, lowerbound, "_longest")
    _gives_up_in("bound")
    assert not tail


def test_a_band_probe_asks_its_second_cover_only_before_the_deadline(
    monkeypatch: pytest.MonkeyPatch, wall: JumpingWall
) -> None:
    # The first cover asked passes the deadline, and is answered feasible (not a proof), so the probe
    # would go on to the next prefill share's cover.
    asked = wall.jump_in(monkeypatch, tailbands, "cover")
    monkeypatch.setattr(tailbands.BandCover, "infeasible", _answered_feasible(tailbands.BandCover.infeasible))
    _gives_up_in("bound")
    assert len(asked) == 1


def _answered_feasible(infeasible: Any) -> Any:
    """``BandCover.infeasible`` that runs the real probe but answers False (no proof)."""

    def probe(self: tailbands.BandCover, makespan_s: float) -> bool:
        infeasible(self, makespan_s)
        return False

    return probe


def test_the_critical_workers_refinement_plays_no_candidate_past_the_hard_deadline(
    monkeypatch: pytest.MonkeyPatch, wall: JumpingWall
) -> None:
    """``refine_critical`` ends each band round and cpsat's repair: past the deadline it gives up
    before playing the last worker's candidate orders."""
    built = build_problem(bench_request(1_024, 16, seed=1))
    with clock.frozen():
        _, queues, finishes = lpt.lpt_start(built, False, 1.0, True)
    played = count_calls(monkeypatch, problem.Problem, "played")
    wall.seconds = wall.after
    with giveup.giving_up_at(DEADLINE), pytest.raises(DeadlinePassedError):
        ordering.refine_critical(built, queues, finishes, False, 1.0)
    assert not played


def test_validation_reads_one_slice_of_the_batch_before_its_first_check(
    monkeypatch: pytest.MonkeyPatch, wall: JumpingWall
) -> None:
    """The deadline passes in the first slice: only ``GIVE_UP_EVERY`` trajectories were read."""
    wall.jump_in(monkeypatch, validation, "_plain_run")
    jumped, slices = validation._plain_run, list[tuple[int, int]]()

    def read(trajectories: Any, largest: int, start: int, stop: int) -> int:
        slices.append((start, stop))
        return jumped(trajectories, largest, start, stop)

    monkeypatch.setattr(validation, "_plain_run", read)
    _gives_up_in("validation")
    assert slices == [(0, validation.GIVE_UP_EVERY)]


def test_a_bad_trajectory_first_in_a_slice_is_named() -> None:
    """The slices meet end to end: the trajectory just past the first slice is read too."""
    request = _request()
    bad = validation.GIVE_UP_EVERY
    trajectories = list(request.trajectories)
    trajectories[bad] = dataclasses.replace(trajectories[bad], prompt_tokens=-1)
    with pytest.raises(InvalidInputError, match="prompt_tokens"):
        validation.validate_request(
            dataclasses.replace(request, trajectories=tuple(trajectories), hard_deadline=None)
        )

"""The floor's last long passes check the caller's hard deadline inside them, and give every bit
they gave unchecked (docs/experiments.md, deadline49).

At 16,384 x 128 the longest stretches left between two checks were the problem's units (~4 ms of CPU
in one pass), the lpt start's at-once pass over every queue (~7 ms) and the keys before the
collector's run at the preparation's end (~2 ms, then the collection); at 32,768 x 256 also
validation's key check (~7 ms) and the bound's first passes (~9 ms). Here the wall jumps past the
deadline inside a pass, and the rest of the pass must not run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from itertools import islice
from typing import Any

import numpy as np
import pytest

from scheduler import at_once, batch_columns, giveup, lowerbound, planner, validation
from scheduler.benchgen import bench_request
from scheduler.errors import DeadlinePassedError
from scheduler.policies import lpt_assign, problem
from scheduler.policies.problem import Problem, build_problem
from scheduler.types import PlanRequest
from tests.scheduler.fake_clock import count_calls
from tests.scheduler.jumping_wall import DEADLINE, JumpingWall


def _request(n: int = 1_024, workers: int = 16) -> PlanRequest:
    return dataclasses.replace(bench_request(n, workers, seed=0), hard_deadline=DEADLINE)


def test_the_problem_gives_up_between_its_slices_of_units(
    monkeypatch: pytest.MonkeyPatch, wall: JumpingWall
) -> None:
    monkeypatch.setattr(problem, "GIVE_UP_EVERY", 256)
    built = wall.jump_in(monkeypatch, problem, "_new_unit")  # the deadline passes as the first unit is built
    with pytest.raises(DeadlinePassedError) as raised:
        planner.prepare(_request())
    assert (raised.value.stage, len(built)) == ("problem", 256)  # one slice of the 1,024 built


def _layout(built: Problem) -> tuple[list[Any], Any, Any, list[int]]:
    """The lpt assignment's queues laid out longest first, as ``order_queues`` plays them at once."""
    assignment = lpt_assign.lpt_assignment(built)
    flat = [u for units in assignment for u in units]
    bounds = np.concatenate(([0], np.cumsum([len(units) for units in assignment]))).tolist()
    order = at_once.longest_first_layout(
        np.repeat(np.arange(len(assignment)), [len(units) for units in assignment]),
        np.asarray(built.steps, dtype=np.int64)[flat],
        np.asarray(flat, dtype=np.int64),
        len(built.steps),
    )
    items = np.asarray(flat, dtype=np.int64)[order]
    steps = np.asarray(built.steps, dtype=np.int64)[items]
    prompts = np.asarray(built.prompts, dtype=np.int64)[items]
    return list(built.costs), prompts, steps, bounds


def test_the_at_once_pass_gives_up_between_its_blocks_of_queues(
    monkeypatch: pytest.MonkeyPatch, wall: JumpingWall
) -> None:
    monkeypatch.setattr(at_once, "GIVE_UP_ITEMS", 128)
    built = build_problem(bench_request(1_024, 16, seed=0))
    played = wall.jump_in(monkeypatch, at_once, "play_at_once")  # the deadline passes in the first block
    with giveup.giving_up_at(DEADLINE), pytest.raises(DeadlinePassedError):
        at_once.all_at_once_finishes(*_layout(built), False)
    assert len(played) == 1  # of the 8 blocks of 128 items: none after the deadline


@pytest.mark.parametrize(("n", "workers"), [(1_024, 16), (4_096, 32), (16_384, 128)])
@pytest.mark.parametrize("reserve", [False, True])
def test_the_blocks_give_every_finish_one_pass_gives_to_the_last_bit(
    monkeypatch: pytest.MonkeyPatch, n: int, workers: int, reserve: bool
) -> None:
    """On the bench batches' lpt queues: blocks of 1 to 4,096 items against one pass of every queue."""
    costs, prompts, steps, bounds = _layout(build_problem(bench_request(n, workers, seed=0)))
    monkeypatch.setattr(at_once, "GIVE_UP_ITEMS", n + 1)
    whole = at_once.all_at_once_finishes(costs, prompts, steps, bounds, reserve)
    for items in (1, 100, 4_096):
        monkeypatch.setattr(at_once, "GIVE_UP_ITEMS", items)
        assert at_once.all_at_once_finishes(costs, prompts, steps, bounds, reserve) == whole


def test_the_keys_are_checked_before_the_collection_after_the_preparation(
    monkeypatch: pytest.MonkeyPatch, wall: JumpingWall
) -> None:
    wall.jump_in(monkeypatch, planner, "trajectory_keys")
    with pytest.raises(DeadlinePassedError) as raised:
        planner.prepare(_request())
    assert raised.value.stage == "keys"


def test_validations_key_check_gives_up_between_its_slices_of_the_batch(
    monkeypatch: pytest.MonkeyPatch, wall: JumpingWall
) -> None:
    sliced: list[int] = []

    def first_slice(column: Any, count: int) -> Any:
        sliced.append(count)
        wall.seconds = wall.after  # the deadline passes as the first slice of pairs is read
        return islice(column, count)

    monkeypatch.setattr(validation, "islice", first_slice)
    with pytest.raises(DeadlinePassedError) as raised:
        planner.prepare(_request(4_096, 32))
    assert (raised.value.stage, sliced) == ("validation", [validation.GIVE_UP_EVERY])


def test_the_bound_gives_up_between_its_first_passes_before_limit_a(
    monkeypatch: pytest.MonkeyPatch, wall: JumpingWall
) -> None:
    longest = count_calls(monkeypatch, lowerbound, "_longest")
    wall.jump_in(monkeypatch, batch_columns, "planned_steps_array")  # the bound reads the trajectories
    request = _request()
    with pytest.raises(DeadlinePassedError) as raised, giveup.giving_up_at(DEADLINE), giveup.stage("bound"):
        lowerbound.lower_bound(request.trajectories, request.inventory)
    assert (raised.value.stage, longest) == ("bound", [])


class _Passes(list[Any]):
    """The batch's trajectories, counting the passes made over them."""

    passes = 0

    def __iter__(self) -> Iterator[Any]:
        self.passes += 1
        return super().__iter__()


def test_the_bounds_columns_give_up_after_the_pass_the_deadline_passed_in_not_after_the_next(
    monkeypatch: pytest.MonkeyPatch, wall: JumpingWall
) -> None:
    """The deadline passes as the planned steps are read (the second pass over the batch): the read
    gives up there, and the third (the generation caps) is not made."""
    wall.jump_in(monkeypatch, batch_columns, "planned_steps_array")
    batch = _Passes(_request().trajectories)
    with pytest.raises(DeadlinePassedError), giveup.giving_up_at(DEADLINE), giveup.stage("bound"):
        batch_columns.from_trajectories(batch)
    assert batch.passes == 2


def test_the_planners_bound_reads_the_problems_columns_and_makes_no_pass_of_its_own(
    monkeypatch: pytest.MonkeyPatch, wall: JumpingWall
) -> None:
    read = count_calls(monkeypatch, batch_columns, "from_trajectories")
    prepared = planner.prepare(_request())
    assert read == []
    assert prepared.bound == lowerbound.lower_bound(prepared.request.trajectories, prepared.request.inventory)
    assert read == [1]  # the bound alone reads them

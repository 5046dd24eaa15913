"""The blocks that deadline49's checks cut the long passes into cover every item once: the at-once
pass's runs of queues (``at_once._blocks``) and the problem's single units (``problem._single_units``).

Found by mutation testing (mutants13, docs/experiments.md): a run of exactly ``GIVE_UP_ITEMS`` items
not closed there, a last block of one unit left out, and the check after the last block of units,
each passed every test."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from scheduler import at_once, clock, giveup, planner
from scheduler.benchgen import bench_request
from scheduler.errors import DeadlinePassedError
from scheduler.policies import problem
from scheduler.policies.problem import build_problem
from tests.scheduler.fake_clock import count_calls
from tests.scheduler.test_giveup import DEADLINE, JumpingWall


def test_a_run_of_exactly_give_up_items_closes_its_block() -> None:
    items = at_once.GIVE_UP_ITEMS
    assert list(at_once._blocks([0, items, 2 * items])) == [(0, 1), (1, 2)]
    assert list(at_once._blocks([0, items - 1, items])) == [(0, 2)]


@pytest.mark.parametrize("n", [1, 2, 9])
def test_every_trajectory_is_a_unit_whatever_is_left_for_the_last_block(
    monkeypatch: pytest.MonkeyPatch, n: int
) -> None:
    monkeypatch.setattr(problem, "GIVE_UP_EVERY", 4)  # blocks of 4: 1, 2 and 9 leave 1, 2 and 1 over
    built = build_problem(bench_request(n, 2, seed=0))
    assert [unit.members for unit in built.units] == [(i,) for i in range(n)]


@pytest.fixture
def wall() -> Iterator[JumpingWall]:
    """The hard deadline's clock, 10 s before it until the test jumps it 0.25 s past."""
    jumping = JumpingWall(DEADLINE - 10.0, DEADLINE + 0.25)
    with clock.frozen(), giveup.reading(jumping):
        yield jumping


def test_the_problem_gives_up_after_its_last_block_of_units_before_ranking_them(
    monkeypatch: pytest.MonkeyPatch, wall: JumpingWall
) -> None:
    monkeypatch.setattr(problem, "GIVE_UP_EVERY", 256)
    built: list[int] = []
    original = problem._new_unit

    def unit(fields: Any) -> Any:
        built.append(1)
        if len(built) > 3 * 256:  # the deadline passes in the last of the 4 blocks
            wall.seconds = wall.after
        return original(fields)

    monkeypatch.setattr(problem, "_new_unit", unit)
    ranked = count_calls(monkeypatch, problem, "_ranked")
    request = dataclasses.replace(bench_request(1_024, 16, seed=0), hard_deadline=DEADLINE)
    with pytest.raises(DeadlinePassedError) as raised:
        planner.prepare(request)
    assert (raised.value.stage, len(built), ranked) == ("problem", 1_024, [])

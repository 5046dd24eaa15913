"""The blocks that deadline49's checks cut the long passes into cover every item once: the at-once
pass's runs of queues (``at_once._blocks``) and the problem's single units (``problem._single_units``).

Found by mutation testing (mutants13, docs/experiments.md): a run of exactly ``GIVE_UP_ITEMS`` items
not closed there, a last block of one unit left out, and the check after the last block of units,
each passed every test."""

from __future__ import annotations

import dataclasses

import pytest

from scheduler import at_once, planner
from scheduler.benchgen import bench_request
from scheduler.errors import DeadlinePassedError
from scheduler.policies import problem
from scheduler.policies.problem import build_problem
from tests.scheduler.fake_clock import count_calls
from tests.scheduler.jumping_wall import DEADLINE, JumpingWall


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


def test_the_problem_gives_up_after_its_last_block_of_units_before_ranking_them(
    monkeypatch: pytest.MonkeyPatch, wall: JumpingWall
) -> None:
    monkeypatch.setattr(problem, "GIVE_UP_EVERY", 256)
    built = wall.jump_in(monkeypatch, problem, "_new_unit", after=3 * 256)  # in the last of the 4 blocks
    ranked = count_calls(monkeypatch, problem, "_ranked")
    request = dataclasses.replace(bench_request(1_024, 16, seed=0), hard_deadline=DEADLINE)
    with pytest.raises(DeadlinePassedError) as raised:
        planner.prepare(request)
    assert (raised.value.stage, len(built), ranked) == ("problem", 1_024, [])

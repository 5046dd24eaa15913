"""The blocks that deadline49's checks cut the long passes into cover every item once: the at-once
pass's runs of queues (``at_once._blocks``) and the problem's single units (``problem._single_units``).

Found by mutation testing (mutants13, docs/experiments.md): a run of exactly ``GIVE_UP_ITEMS`` items
not closed there, and a last block of one unit left out, each passed every test."""

from __future__ import annotations

import pytest

from scheduler import at_once
from scheduler.benchgen import bench_request
from scheduler.policies import problem
from scheduler.policies.problem import build_problem


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

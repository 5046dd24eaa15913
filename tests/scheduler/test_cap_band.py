"""Under prefix affinity, cpsat also realises its band counts with more workers in the cap band,
and keeps such a plan where it finishes sooner; without affinity it follows the band model only."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import scheduler.policies.bandround as bandround_module
import scheduler.policies.bandsearch as bandsearch
import scheduler.policies.cpsat as cpsat_module
from scheduler import clock
from scheduler.benchgen import bench_request
from scheduler.planner import plan
from scheduler.policies import capband, exchange
from scheduler.policies.base import Placement
from scheduler.policies.levels import LevelPlan
from scheduler.policies.lpt import lpt_start
from scheduler.policies.lpt_assign import lpt_assignment
from scheduler.policies.problem import build_problem, worker_kinds

BATCH = bench_request(1_024, 16, seed=0)  # with affinity, its capped groups crowd the cap band's workers


class _Rounds:
    """Spies on cpsat's rounds: the tiers of each banded placement, and what the repair starts from."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.tiers: list[tuple[int, ...]] = []
        self.placed: list[list[list[int]]] = []
        self.repaired_from: list[list[int]] | None = None
        improve = exchange.improve

        def placed(*args: Any, **kwargs: Any) -> list[list[int]]:
            assignment = lpt_assignment(*args, **kwargs)
            self.tiers.append(tuple(args[1]))
            self.placed.append(assignment)
            return assignment

        def repaired(*args: Any, **kwargs: Any) -> Any:
            self.repaired_from = args[1]
            return improve(*args, **kwargs)

        monkeypatch.setattr(bandround_module, "lpt_assignment", placed)
        monkeypatch.setattr(cpsat_module, "improve", repaired)

    def at_cap(self, tiers: tuple[int, ...]) -> int:
        """Workers at the cap band: the highest band the model's own counts (the first round) used."""
        return tiers.count(max(self.tiers[0]))


def test_under_affinity_a_round_with_more_workers_in_the_cap_band_beats_the_band_models_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The plan the repair starts from was placed with more workers at the cap band than the band
    model chose. The shifted rounds run after the model's own and replace the best plan only when
    they finish sooner, so that plan beat every round on the model's counts."""
    rounds = _Rounds(monkeypatch)
    with clock.frozen():
        plan(dataclasses.replace(BATCH, prefix_affinity=True), "cpsat")
    assert rounds.repaired_from in rounds.placed
    winner = rounds.tiers[rounds.placed.index(rounds.repaired_from)]
    assert rounds.at_cap(winner) > rounds.at_cap(rounds.tiers[0])


def test_without_affinity_every_round_follows_the_band_models_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    rounds = _Rounds(monkeypatch)
    with clock.frozen():
        plan(BATCH, "cpsat")
    assert len(rounds.tiers) == bandsearch.ROUNDS + bandsearch.EXTRA_ROUNDS
    assert all(tiers == rounds.tiers[0] for tiers in rounds.tiers)


def test_a_shifted_round_starts_only_while_its_share_of_the_budget_is_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    request = dataclasses.replace(BATCH, prefix_affinity=True)
    problem = build_problem(request)
    with clock.frozen():  # the clock reads 0 throughout: ``deadline`` is what is left
        assignment, queues, finishes = lpt_start(problem, request.kv_admission, request.time_budget_s, True)
        lpt_plan = Placement(queues, "FALLBACK_LPT", finish_s=finishes)
        kinds = worker_kinds(problem.costs, problem.active)
        levels = bandsearch.solve(problem, kinds, max(finishes), request, request.time_budget_s)
        assert levels is not None
        rounds = _Rounds(monkeypatch)

        def shifted(left: float) -> tuple[Placement, list[list[int]]]:
            deadline = left * request.time_budget_s
            return bandsearch.cap_band_rounds(problem, request, lpt_plan, assignment, 0.0, deadline, levels)

        assert shifted(0.99 * capband.CAP_LEFT) == (lpt_plan, assignment)
        assert rounds.tiers == []
        shifted(capband.CAP_LEFT)
    top = len(levels.edges) - 1
    assert len(rounds.tiers) > 0
    assert all(tiers.count(top) > sum(row[top] for row in levels.counts) for tiers in rounds.tiers)


def test_a_shift_moves_the_cap_kinds_lowest_band_workers_first_a_tenth_of_its_cap_count_a_step() -> None:
    levels = LevelPlan(
        edges=(10, 20, 30, 40), counts=((2, 3, 1, 20), (4, 0, 0, 2)), makespan_s=1.0, status="OPTIMAL"
    )
    assert capband.cap_shifted(levels, 1).counts == ((0, 3, 1, 22), (4, 0, 0, 2))
    assert capband.cap_shifted(levels, 2).counts == ((0, 1, 1, 24), (4, 0, 0, 2))
    assert capband.cap_shifted(levels, 3).counts == ((0, 0, 0, 26), (4, 0, 0, 2))
    assert capband.cap_shifted(levels, 4).counts == ((0, 0, 0, 26), (4, 0, 0, 2))  # none left to move


def test_a_shift_with_no_worker_left_below_the_cap_band_changes_nothing() -> None:
    levels = LevelPlan(edges=(10, 20), counts=((0, 3), (2, 0)), makespan_s=1.0, status="OPTIMAL")
    assert capband.cap_shifted(levels, 1) == levels


def test_rounds_after_the_first_set_aside_the_units_that_would_pass_the_previous_rounds_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caps: list[float | None] = []

    def placed(*args: Any, **kwargs: Any) -> list[list[int]]:
        caps.append(kwargs.get("cap_s"))
        return lpt_assignment(*args, **kwargs)

    monkeypatch.setattr(bandround_module, "lpt_assignment", placed)
    with clock.frozen():
        plan(bench_request(4_096, 32, seed=0), "cpsat")
    assert len(caps) >= 2
    assert caps[0] is None  # the first round places within the bands alone
    assert all(cap is not None and cap > 0 for cap in caps[1:])  # then the calibrated cap (bandsearch.DEFER)

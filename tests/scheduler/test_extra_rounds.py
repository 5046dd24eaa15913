"""Where the budget is clearly not spent and the plan is judged on point predictions alone, cpsat's
band rounds go on past the second, each calibrated by the play of the one before; with under half
the budget left, or with quantiles or prefix affinity, they stop at two as before."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import scheduler.policies.bandround as bandround_module
import scheduler.policies.bandsearch as bandsearch
from scheduler import clock
from scheduler.benchgen import bench_request
from scheduler.planner import plan
from scheduler.policies import cpsat as cpsat_module
from scheduler.policies.base import Placement
from scheduler.policies.lpt import lpt_start
from scheduler.policies.lpt_assign import lpt_assignment
from scheduler.policies.problem import build_problem
from scheduler.types import PlanRequest

BATCH = bench_request(1_024, 16, seed=0)


class _Placements:
    """Spies on cpsat's banded placements: the calibration scale each round was given."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.scales: list[tuple[float, ...] | None] = []

        def placed(*args: Any, **kwargs: Any) -> list[list[int]]:
            scale = args[3] if len(args) > 3 else kwargs.get("scale")
            self.scales.append(None if scale is None else tuple(scale))
            return lpt_assignment(*args, **kwargs)

        monkeypatch.setattr(bandround_module, "lpt_assignment", placed)


def _rounds_with(monkeypatch: pytest.MonkeyPatch, left: float) -> list[tuple[float, ...] | None]:
    """The rounds' scales when the whole-batch rounds start with ``left`` of the budget to go."""
    problem = build_problem(BATCH)
    with clock.frozen():  # the clock reads 0 throughout: ``deadline`` is what is left
        assignment, queues, finishes = lpt_start(problem, BATCH.kv_admission, BATCH.time_budget_s, True)
        lpt_plan = Placement(queues, "FALLBACK_LPT", finish_s=finishes)
        placements = _Placements(monkeypatch)
        more = bandsearch.EXTRA_ROUNDS
        bandsearch.rounds(problem, BATCH, lpt_plan, assignment, 0.0, left * BATCH.time_budget_s, more=more)
    return placements.scales


def test_with_half_the_budget_left_each_extra_round_is_calibrated_by_the_round_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scales = _rounds_with(monkeypatch, bandsearch.EXTRA_LEFT)
    assert len(scales) == bandsearch.ROUNDS + bandsearch.EXTRA_ROUNDS > bandsearch.ROUNDS
    assert scales[0] is None  # round 1 as the band model plans it
    assert all(s is not None for s in scales[1:])
    assert len(set(scales[1:])) == len(scales) - 1  # a new verdict each round, not round 1's again


def test_with_less_than_half_the_budget_left_the_rounds_stop_at_two(monkeypatch: pytest.MonkeyPatch) -> None:
    assert len(_rounds_with(monkeypatch, 0.99 * bandsearch.EXTRA_LEFT)) == bandsearch.ROUNDS


def test_the_extra_rounds_never_make_the_rounds_plan_later(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rounds keep the best plan so far, so more of them never make it later: on seeds 0-4 equal on
    3 and earlier on 2 (334.37 -> 334.28 s, 348.43 -> 348.17 s; seeds 0-9 none later, helper tests67).
    With the plateau pass after them (``cpsat``'s ``lower``) on, the final plan can be later: the pass
    starts from another plan (seed 2: 334.19 -> 334.24 s). It is off here, as in
    tests/scheduler/test_above_others.py; seed 0 alone, where this test stood, was equal both ways."""
    monkeypatch.setattr(cpsat_module, "lower", lambda *args, **kwargs: None)
    gains = []
    for seed in range(5):
        batch = bench_request(1_024, 16, seed=seed)
        with monkeypatch.context() as two_rounds, clock.frozen():
            more = plan(batch, "cpsat").predicted_makespan_s
            two_rounds.setattr(bandsearch, "EXTRA_ROUNDS", 0)
            gains.append(plan(batch, "cpsat").predicted_makespan_s - more)
    assert min(gains) >= 0.0, gains
    assert max(gains) > 0.0, gains  # else the rounds past the second did nothing here


def _with_quantiles(request: PlanRequest) -> PlanRequest:
    """Every trajectory with its p50 at the prediction and p90 at 1.2x it (capped)."""
    return dataclasses.replace(
        request,
        trajectories=tuple(
            dataclasses.replace(
                t,
                quantiles={
                    0.5: t.predicted_tokens,
                    0.9: min(1.2 * t.predicted_tokens, float(t.max_new_tokens)),
                },
            )
            for t in request.trajectories
        ),
    )


@pytest.mark.parametrize("variant", ["quantiles", "affinity"])
def test_plans_judged_on_draws_or_by_group_keep_two_rounds(
    monkeypatch: pytest.MonkeyPatch, variant: str
) -> None:
    request = (
        _with_quantiles(BATCH) if variant == "quantiles" else dataclasses.replace(BATCH, prefix_affinity=True)
    )
    seen: list[int] = []
    rounds = bandsearch.rounds

    def counted(*args: Any, **kwargs: Any) -> Any:
        seen.append(int(kwargs.get("more", 0)))
        return rounds(*args, **kwargs)

    monkeypatch.setattr(bandsearch, "rounds", counted)
    with clock.frozen():
        plan(dataclasses.replace(request, time_budget_s=5.0), "cpsat")
    assert seen  # the rounds ran
    assert set(seen) == {0}

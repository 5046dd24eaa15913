"""With quantiles, the robust choice costs what its draws measure, so the band search is not starved."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from scheduler import clock
from scheduler.at_once import all_at_once_finish
from scheduler.benchgen import bench_request
from scheduler.costmodel import WorkerCost
from scheduler.finish_draws import draw_finishes
from scheduler.planner import plan
from scheduler.policies import cpsat as cpsat_module
from scheduler.policies import robust, robust_order
from scheduler.policies.lpt import lpt_assignment, lpt_start
from scheduler.policies.problem import Problem, build_problem
from scheduler.policies.robust import MIN_SAMPLES, SAMPLES, baseline, judged, least_expected, spreads
from scheduler.stepsum import FloatArray
from scheduler.types import PlanRequest


class ManualClock:
    """A planning clock that moves only when the test says so."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def now(self) -> float:
        return self.seconds


def _with_quantiles(request: PlanRequest, ratio: float) -> PlanRequest:
    """``request`` with every trajectory's p50 its prediction and p90 ``ratio`` times that."""
    batch = tuple(
        dataclasses.replace(
            t, quantiles={0.5: t.predicted_tokens, 0.9: min(t.predicted_tokens * ratio, t.max_new_tokens)}
        )
        for t in request.trajectories
    )
    return dataclasses.replace(request, trajectories=batch)


REQUEST = _with_quantiles(bench_request(1_024, 16, seed=0, time_budget_s=10.0), 1.2)


def _slow_draws(monkeypatch: pytest.MonkeyPatch, fake: ManualClock, per_draw_s: float) -> None:
    """Every play of a plan on draws takes ``per_draw_s`` a draw on ``fake``."""
    played = robust.makespans

    def timed(
        problem: Problem, queues: Sequence[Sequence[int]], draws: np.ndarray, reserve: bool
    ) -> FloatArray:
        fake.seconds += per_draw_s * len(draws)
        return played(problem, queues, draws, reserve)

    monkeypatch.setattr(robust, "makespans", timed)


def test_the_band_search_runs_with_quantiles_when_the_choice_fits_however_long_the_lpt_phase_took(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # an lpt phase of 1 s on a 10 s budget: the search used to keep 32 lpt phases for the choice,
    # which never fitted, while the choice's draws here take no time at all
    fake = ManualClock()
    monkeypatch.setattr(clock, "now", fake.now)

    def slow_start(*args: object) -> object:
        fake.seconds += 1.0
        return lpt_start(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(cpsat_module, "lpt_start", slow_start)
    searched: list[int] = []
    rounds = cpsat_module.CpSatPolicy._rounds

    def counted(self: cpsat_module.CpSatPolicy, *args: object) -> object:
        searched.append(1)
        return rounds(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(cpsat_module.CpSatPolicy, "_rounds", counted)
    searched_plan = plan(REQUEST, "cpsat")
    assert searched == [1]
    assert searched_plan.status in {"OPTIMAL", "FEASIBLE", "ROBUST_LPT"}  # the search's, judged


def test_the_lpt_plan_is_played_on_as_many_draws_as_fit_a_share_of_the_time_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    problem, spread = build_problem(REQUEST), spreads(REQUEST.trajectories)
    assert spread is not None
    queues = lpt_start(problem, False, float("inf"), False)[1]
    fake = ManualClock()
    monkeypatch.setattr(clock, "now", fake.now)
    _slow_draws(monkeypatch, fake, 0.01)
    # 0.25 of the 0.96 s left after the first 4 draws, at 0.02 s a draw of both plans: 12 draws
    base = baseline(problem, queues, spread, False, 0, deadline=1.0)
    assert len(base.draws) == len(base.makespans) == 12
    assert base.cost_s == pytest.approx(12 * 0.01)
    assert len(baseline(problem, queues, spread, False, 0, deadline=fake.seconds + 100.0).draws) == SAMPLES
    assert len(baseline(problem, queues, spread, False, 0, deadline=fake.seconds).draws) == MIN_SAMPLES


def test_a_plan_whose_draws_would_end_past_the_deadline_is_not_judged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    problem, spread = build_problem(REQUEST), spreads(REQUEST.trajectories)
    assert spread is not None
    queues = lpt_start(problem, False, float("inf"), False)[1]
    fake = ManualClock()
    monkeypatch.setattr(clock, "now", fake.now)
    _slow_draws(monkeypatch, fake, 0.01)
    base = baseline(problem, queues, spread, False, 0, deadline=100.0)  # 32 draws: 0.32 s
    assert judged(problem, queues, base, False, deadline=fake.seconds + 0.3) is None
    assert judged(problem, queues, base, False, deadline=fake.seconds + 0.4) is True  # ties: the plan


def test_on_a_frozen_clock_the_choice_is_the_one_over_every_draw() -> None:
    problem, spread = build_problem(REQUEST), spreads(REQUEST.trajectories)
    assert spread is not None
    lpt_queues = lpt_start(problem, False, float("inf"), False)[1]
    crowded = [[u for q in lpt_queues for u in q]] + [[] for _ in lpt_queues[1:]]
    with clock.frozen():
        base = baseline(problem, lpt_queues, spread, False, 3, deadline=0.0)
        assert len(base.draws) == SAMPLES
        for queues in (crowded, list(reversed(lpt_queues))):
            chosen = least_expected(problem, (queues, lpt_queues), spread, False, 3, deadline=0.0)
            assert judged(problem, queues, base, False, deadline=0.0) is (chosen == 0)


def test_queues_in_waves_are_told_apart_in_one_pass_as_one_by_one() -> None:
    request = dataclasses.replace(REQUEST, kv_admission=True)
    problem = build_problem(request)
    assignment = lpt_assignment(problem)
    crowded = [[u for q in assignment for u in q]] + [[] for _ in assignment[1:]]  # one queue in waves
    for queues in (assignment, crowded, [q[:1] for q in assignment]):
        waves = robust_order._in_waves(problem, tuple(tuple(q) for q in queues), True)
        assert waves == [
            len(q) >= 2 and all_at_once_finish(problem.costs[w], *problem.lengths(q), True) is None
            for w, q in enumerate(queues)
        ]
    assert any(robust_order._in_waves(problem, tuple(tuple(q) for q in crowded), True))


def test_a_plan_is_not_judged_when_its_first_draw_is_already_too_slow(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # its draws go through the event loop, so the lpt plan's vectorised pace says nothing of them:
    # the first draw is played a few workers at a time and given up once its pace is too slow
    problem, spread = build_problem(REQUEST), spreads(REQUEST.trajectories)
    assert spread is not None
    queues = lpt_start(problem, False, float("inf"), False)[1]
    base = baseline(problem, queues, spread, False, 0, deadline=float("inf"))
    fake = ManualClock()
    monkeypatch.setattr(clock, "now", fake.now)
    played: list[int] = []

    def slow(costs: Sequence[WorkerCost], *args: Any) -> FloatArray:
        played.append(len(costs))
        fake.seconds += 1.0
        return draw_finishes(costs, *args)

    monkeypatch.setattr(robust, "draw_finishes", slow)
    # 16 workers, 8 a chunk: one chunk (1 s) projects the second by second 2, past second 1.5
    assert judged(problem, queues, base, False, deadline=1.5) is None
    assert played == [robust.CHUNK]
    fake.seconds, played[:] = 0.0, []
    assert judged(problem, queues, base, False, deadline=100.0) is True  # the lpt plan against itself
    assert played == [robust.CHUNK, robust.CHUNK, len(queues)]  # then every other draw in one pass

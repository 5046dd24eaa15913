"""With quantiles, the robust choice costs what its draws measure, so the band search is not starved."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from scheduler import clock, finish_draws
from scheduler.at_once import all_at_once_finish
from scheduler.benchgen import bench_request
from scheduler.finish import worker_finish
from scheduler.finish_draws import draw_finishes
from scheduler.planner import plan
from scheduler.policies import bandsearch, robust, robust_order
from scheduler.policies import cpsat as cpsat_module
from scheduler.policies import lpt as lpt_module
from scheduler.policies.lpt_assign import lpt_assignment
from scheduler.policies.problem import Problem, build_problem
from scheduler.policies.robust import (
    MIN_SAMPLES,
    SAMPLES,
    Spread,
    baseline,
    completed,
    judged,
    least_expected,
)
from scheduler.stepsum import FloatArray
from tests.scheduler.fake_clock import ManualClock, count_calls, slow_lpt_phase
from tests.scheduler.quantiled_bench import REQUEST, lpt_plan, point_finishes, with_quantiles


def _slow_draws(monkeypatch: pytest.MonkeyPatch, fake: ManualClock, per_draw_s: float) -> None:
    """Every play of a plan on draws takes ``per_draw_s`` a draw on ``fake``."""
    played = robust.makespans

    def timed(
        problem: Problem, queues: Sequence[Sequence[int]], draws: np.ndarray, reserve: bool
    ) -> FloatArray:
        fake.seconds += per_draw_s * len(draws)
        return played(problem, queues, draws, reserve)

    monkeypatch.setattr(robust, "makespans", timed)


def _lpt_on_slow_draws(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[Problem, Spread, tuple[tuple[int, ...], ...], ManualClock]:
    """``REQUEST``'s problem, spread and lpt queues, on a fake clock where a draw of a plan takes 10 ms."""
    problem, spread, queues = lpt_plan(REQUEST)
    fake = ManualClock()
    monkeypatch.setattr(clock, "now", fake.now)
    _slow_draws(monkeypatch, fake, 0.01)
    return problem, spread, queues, fake


def test_the_band_search_runs_with_quantiles_when_the_choice_fits_however_long_the_lpt_phase_took(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # an lpt phase of 1 s on a 10 s budget: the search used to keep 32 lpt phases for the choice,
    # which never fitted, while the choice's draws here take no time at all
    slow_lpt_phase(monkeypatch, lpt_module)
    searched = count_calls(monkeypatch, bandsearch, "rounds")
    searched_plan = plan(REQUEST, "cpsat")
    assert searched == [1]
    # the search's status, judged; or the plan lpt returns, saying so (here the at-once hedge keeps
    # the fastest-kind-first plan over the searched one, as it does over lpt's: budget49)
    same_as_lpt = [w.items for w in searched_plan.workers] == [w.items for w in plan(REQUEST, "lpt").workers]
    assert searched_plan.status in {"OPTIMAL", "FEASIBLE", "ROBUST_LPT"} or (
        searched_plan.status == "FALLBACK_LPT" and same_as_lpt
    )


def test_the_lpt_plan_is_played_on_as_many_draws_as_fit_a_share_of_the_time_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    problem, spread, queues, fake = _lpt_on_slow_draws(monkeypatch)
    # 0.25 of the 0.96 s left after the first 4 draws, at 0.02 s a draw of both plans: 12 draws
    base = baseline(problem, queues, spread, False, 0, deadline=1.0)
    assert len(base.draws) == 12
    assert len(base.makespans) == MIN_SAMPLES  # the rest only when a plan that differs is judged
    assert base.cost_s == pytest.approx(12 * 0.01)
    assert base.pending_s == pytest.approx(8 * 0.01)
    assert len(completed(problem, base, False).makespans) == 12
    assert len(baseline(problem, queues, spread, False, 0, deadline=fake.seconds + 100.0).draws) == SAMPLES
    assert len(baseline(problem, queues, spread, False, 0, deadline=fake.seconds).draws) == MIN_SAMPLES


def test_a_plan_whose_draws_would_end_past_the_deadline_is_not_judged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    problem, spread, queues, fake = _lpt_on_slow_draws(monkeypatch)
    base = baseline(problem, queues, spread, False, 0, deadline=100.0)  # 32 draws: 0.32 s a plan
    points = point_finishes(problem, queues, False)
    # the lpt plan's 28 draws still to play (0.28 s) and this plan's 32 (0.32 s)
    assert judged(problem, queues, base, False, fake.seconds + 0.55, points) is None
    assert judged(problem, queues, base, False, fake.seconds + 0.65, points) is True  # ties: the plan


def test_the_lpt_plan_is_played_on_every_draw_only_when_a_plan_that_differs_is_judged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A search that returns the lpt plan itself (the long chain-of-thought headline's always do)
    makes no choice: playing all 32 draws up front doubled that replay's planning time."""
    problem, spread, queues, fake = _lpt_on_slow_draws(monkeypatch)
    baseline(problem, queues, spread, False, 0, deadline=100.0)
    assert fake.seconds == pytest.approx(MIN_SAMPLES * 0.01)


def test_on_a_frozen_clock_the_choice_is_the_one_over_every_draw() -> None:
    problem, spread, lpt_queues = lpt_plan(REQUEST)
    crowded = [[u for q in lpt_queues for u in q]] + [[] for _ in lpt_queues[1:]]
    with clock.frozen():
        base = baseline(problem, lpt_queues, spread, False, 3, deadline=0.0)
        assert len(base.draws) == SAMPLES
        for queues in (crowded, list(reversed(lpt_queues))):
            chosen = least_expected(problem, (queues, lpt_queues), spread, False, 3, deadline=0.0)
            points = point_finishes(problem, queues, False)
            assert judged(problem, queues, base, False, 0.0, points) is (chosen == 0)


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


def test_a_plan_in_waves_is_judged_without_playing_every_draw_through_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # one crowded queue in waves, under KV admission: each of its plays costs 1 s on the clock, and
    # the verdict (it is the worse bet, by far) needs none of its 32, so it fits a 1 s deadline
    request = dataclasses.replace(REQUEST, kv_admission=True)
    problem, spread, queues = lpt_plan(request)
    crowded = [[u for q in queues for u in q]] + [[] for _ in queues[1:]]
    fake = ManualClock()  # the baseline's plays too: on the host's clock they measured 1.59 s at load ~19
    monkeypatch.setattr(clock, "now", fake.now)  # (cost and pending), past the 1 s deadline: no verdict
    base = baseline(problem, queues, spread, True, 0, deadline=float("inf"))
    played = worker_finish

    def slow(*args: Any) -> float:
        fake.seconds += 1.0
        return played(*args)

    monkeypatch.setattr(finish_draws, "worker_finish", slow)
    assert judged(problem, crowded, base, True, 1.0, point_finishes(problem, crowded, True)) is False
    assert fake.seconds == 0.0


def test_estimates_that_cannot_settle_the_verdict_are_played_and_it_is_the_exact_one() -> None:
    # the lpt plan against itself on draws: every estimate of a play of its own is a tie the
    # bounds cannot settle, so the judge plays what decides each draw and ties go to the plan
    request = dataclasses.replace(REQUEST, kv_admission=True)
    problem, spread, queues = lpt_plan(request)
    crowded = [[u for q in queues for u in q]] + [[] for _ in queues[1:]]
    with clock.frozen():
        base = baseline(problem, crowded, spread, True, 0, deadline=0.0)
        assert judged(problem, crowded, base, True, 0.0, point_finishes(problem, crowded, True)) is True


def test_estimated_finishes_are_the_plays_wherever_they_are_not_marked_and_near_them_where_they_are() -> None:
    request = dataclasses.replace(
        with_quantiles(bench_request(1_024, 16, seed=1, time_budget_s=1.0), 1.6), kv_admission=True
    )
    problem, spread, queues = lpt_plan(request)
    crowded = [list(q) for q in queues]
    crowded[0] = [u for q in queues[:4] for u in q]  # past its cache on some draws or in waves
    for w in (1, 2, 3):
        crowded[w] = []
    draws = robust.draw_matrix(spread, np.random.default_rng(1), 8)
    exact = draw_finishes(problem.costs, problem.prompts, crowded, draws, True)
    values, approx = finish_draws.estimated_finishes(
        problem.costs,
        problem.prompts,
        crowded,
        draws,
        True,
        problem.steps,
        point_finishes(problem, crowded, True),
    )
    assert approx.any()
    assert (values[~approx] == exact[~approx]).all()
    assert (
        (values[approx] / exact[approx] <= robust.SLACK) & (exact[approx] / values[approx] <= robust.SLACK)
    ).all()
    finish_draws.replay_cells(problem.costs, problem.prompts, crowded, draws, values, approx, True)
    assert (values == exact).all()


@pytest.mark.parametrize(("budget_s", "drawn"), [(1.9, False), (2.1, True)])
def test_the_lpt_plans_draws_are_not_started_with_less_than_their_price_in_lpt_phases_left(
    monkeypatch: pytest.MonkeyPatch, budget_s: float, drawn: bool
) -> None:
    """The lpt phase seems to take a second and nothing else any time: the lpt plan's first draws
    (``baseline``), played before their pace is known, are priced at ``BASELINE_COST`` (1) lpt
    phase, so with 0.9 s left after the lpt phase they are not played (nor is the search, which
    needs them), with 1.1 s they are. They used to start whenever any time was left."""
    request = dataclasses.replace(REQUEST, time_budget_s=budget_s)
    slow_lpt_phase(monkeypatch, lpt_module)
    played = count_calls(monkeypatch, cpsat_module, "baseline")
    cpsat_module.CpSatPolicy().plan(request, build_problem(request))
    assert bool(played) == drawn

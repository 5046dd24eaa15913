"""The bar's draws are priced at what they will cost (``blindbar.draws_price``): the drawing only for
the rows the plan does not hold yet, the first chunk's play in any case.

Why. The plan's draws are drawn once and shared (``Problem.draws``): where the at-once hedge or the
bar's own screen drew them, the bar's weighing reads them for nothing, and a whole lpt phase charged
for them kept the bar from draws that fitted (docs/experiments.md, draws52). Here only what the
test names takes time on a fake clock, with an lpt phase of a second.
"""

from __future__ import annotations

import pytest

from scheduler import clock
from scheduler.policies import blindbar, lpt
from scheduler.policies.blindbar import DRAWS_COST, Blind
from scheduler.policies.plan_draws import DRAWING, SAMPLES
from scheduler.policies.problem import build_problem
from scheduler.policies.robust import Spread, spreads
from scheduler.policies.round_robin import RoundRobinPolicy
from scheduler.types import PlanRequest
from tests.scheduler.fake_clock import ManualClock, count_calls, slow_stage
from tests.scheduler.mixed_requests import grouped_request

PHASE_S = 1.0  # the lpt start's time on the fake clock: prices read as lpt phases
HELD = SAMPLES // 4  # rows a plan holds before the bar, as after the at-once hedge's first blocks
MARGIN = 0.01  # of an lpt phase: either side of a price


def _spread_of(request: PlanRequest) -> Spread:
    spread = spreads(request.trajectories)
    assert spread is not None
    return spread


def _bar_asked(monkeypatch: pytest.MonkeyPatch, held: int, deadline: float) -> bool:
    """Whether the bar (``blindbar.barred``, its plan later than its blind plan) played its draws
    with ``deadline`` left on a clock standing at 0, the plan holding ``held`` of its draws."""
    request = grouped_request()
    problem, spread = build_problem(request), _spread_of(request)
    placement = RoundRobinPolicy().plan(request, problem)
    blind = Blind(placement.queues, tuple(0.0 for _ in placement.queues))  # ends before any plan
    if held:
        problem.draws(spread, request.seed).rows(held)
    monkeypatch.setattr(clock, "now", ManualClock().now)
    asked = count_calls(monkeypatch, blindbar, "outlived")  # the bar's first play of its draws
    blindbar.barred(problem, request, placement, blind, "BASELINE", spread, deadline, None, PHASE_S)
    return bool(asked)


IN_HAND_S = (DRAWS_COST - DRAWING) * PHASE_S  # every row held: the first chunk's play alone
NONE_HELD_S = DRAWS_COST * PHASE_S


def test_a_bar_holding_its_draws_plays_them_where_drawing_them_would_not_have_fitted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _bar_asked(monkeypatch, SAMPLES, IN_HAND_S + MARGIN)
    assert not _bar_asked(monkeypatch, 0, IN_HAND_S + MARGIN)  # the same time left, none held


def test_a_bar_holding_its_draws_still_needs_the_first_chunks_play_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert not _bar_asked(monkeypatch, SAMPLES, IN_HAND_S - MARGIN)


def test_a_bar_holding_none_of_its_draws_needs_the_whole_price_left(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not _bar_asked(monkeypatch, 0, NONE_HELD_S - MARGIN)
    assert _bar_asked(monkeypatch, 0, NONE_HELD_S + MARGIN)


def test_the_rows_still_to_draw_are_charged_their_share(monkeypatch: pytest.MonkeyPatch) -> None:
    price_s = NONE_HELD_S - DRAWING * PHASE_S * HELD / SAMPLES
    assert not _bar_asked(monkeypatch, HELD, price_s - MARGIN)
    assert _bar_asked(monkeypatch, HELD, price_s + MARGIN)


def _blind_plans_built(monkeypatch: pytest.MonkeyPatch, held: int, deadline: float) -> bool:
    """Whether ``lpt.bar_plans`` (with quantiles) built the blind plans, dealing them taking
    ``BLIND_COST`` lpt phases, with ``deadline`` left and ``held`` of the plan's draws in hand."""
    request = grouped_request()
    problem, spread = build_problem(request), _spread_of(request)
    if held:
        problem.draws(spread, request.seed).rows(held)
    assignment = [list(queue) for queue in RoundRobinPolicy().plan(request, problem).queues]
    slow_stage(monkeypatch, blindbar, "_candidates", blindbar.BLIND_COST * PHASE_S)
    return lpt.bar_plans(problem, request, None, assignment, spread, deadline, PHASE_S) is not None


def test_the_blind_plans_are_built_where_the_bars_draws_in_hand_leave_the_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    deadline = blindbar.BLIND_COST * PHASE_S + IN_HAND_S + MARGIN
    assert _blind_plans_built(monkeypatch, SAMPLES, deadline)
    assert not _blind_plans_built(monkeypatch, 0, deadline)  # drawing them would not fit after

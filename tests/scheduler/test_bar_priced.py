"""The bar (``blindbar.barred``) stops by the plan's deadline: its draws start only with their price
left (``DRAWS_COST`` lpt phases), its ordering stops at its measured pace, and the plan stands where
there is no time (review50a).

Unpriced, the draws (drawn, and their first chunk played before any pace was known) ended 4,096 x 32
plans up to 7 ms past the service's 80 ms default (budget50 saw 80.7 ms). Here only what the test
names takes time on a fake clock, so what the bar spends is that alone.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from scheduler import clock
from scheduler.policies import blindbar, lpt, plan_draws
from scheduler.policies.base import Placement
from scheduler.policies.blindbar import Blind
from scheduler.policies.cpsat import CpSatPolicy
from scheduler.policies.lpt import LptPolicy
from scheduler.policies.problem import Problem, build_problem
from scheduler.policies.robust import spreads
from scheduler.policies.round_robin import RoundRobinPolicy
from tests.scheduler.fake_clock import ManualClock, count_calls, slow_lpt_phase, slow_stage
from tests.scheduler.mixed_requests import grouped_request

PLAY_S = 0.01  # what one play of a queue takes on the fake clock


def _barred(
    monkeypatch: pytest.MonkeyPatch, deadline: float, asked: bool | None = False
) -> tuple[Placement, Placement, float]:
    """A plan later on the predictions than its blind plan, whose queues run in waves (8 slots,
    16 trajectories a worker), through the bar with ``deadline``: the plan given, the plan returned,
    and the fake clock's time when the bar returned. The draws are not asked (``outlived``), or
    ``asked`` says so."""
    request = grouped_request(slots=8)
    problem = build_problem(request)
    placement = RoundRobinPolicy().plan(request, problem)
    blind = Blind(placement.queues, tuple(0.0 for _ in placement.queues))  # ends before any plan
    monkeypatch.setattr(blindbar, "outlived", lambda *args: asked)
    fake = ManualClock()
    monkeypatch.setattr(clock, "now", fake.now)
    original = Problem.played

    def played(self: Problem, *args: Any, **kwargs: Any) -> float:
        fake.seconds += PLAY_S
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Problem, "played", played)
    spread = spreads(request.trajectories)
    chosen = blindbar._bar(problem, request, placement, blind, "BASELINE", spread, deadline)
    return placement, chosen, fake.seconds


def test_the_bar_orders_no_queue_past_the_plans_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    deadline = 1.5 * PLAY_S  # time for one play, not for every queue's
    _, _, ended = _barred(monkeypatch, deadline)
    assert ended <= deadline


def test_a_bar_with_no_time_to_order_the_queues_keeps_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    placement, chosen, _ = _barred(monkeypatch, 1.5 * PLAY_S)
    assert chosen is placement


def test_a_bar_with_no_time_to_tell_whether_the_draws_are_asked_keeps_the_plan_unplayed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    placement, chosen, ended = _barred(monkeypatch, 1e9, None)
    assert chosen is placement
    assert ended == 0.0  # no queue ordered, no draw played: ``outlived`` ran out of time


def test_a_bar_with_time_orders_every_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, ended = _barred(monkeypatch, 1e9)
    workers = len(build_problem(grouped_request(slots=8)).costs)
    assert ended >= workers * PLAY_S  # every queue played at least once
    assert ended > 1.5 * PLAY_S  # so the deadline above cuts this ordering short


DRAW_S = 1.0  # what drawing the bar's draws takes on the fake clock: one lpt phase (``DRAWS_COST``)


def _drawing(monkeypatch: pytest.MonkeyPatch, deadline: float) -> tuple[Placement, Placement, float]:
    """A plan through ``barred`` with an lpt phase of a second, drawing the draws taking
    ``DRAW_S`` on the fake clock and nothing else any time: the plan given, the plan returned and
    the time when the bar returned."""
    request = grouped_request()
    problem = build_problem(request)
    placement = RoundRobinPolicy().plan(request, problem)
    blind = Blind(placement.queues, placement.finish_s)
    fake = slow_stage(monkeypatch, plan_draws, "draw_matrix", DRAW_S)
    spread = spreads(request.trajectories)
    chosen = blindbar.barred(problem, request, placement, blind, "BASELINE", spread, deadline, None, 1.0)
    return placement, chosen, fake.seconds


def test_the_bar_draws_nothing_with_less_than_their_price_left(monkeypatch: pytest.MonkeyPatch) -> None:
    placement, chosen, ended = _drawing(monkeypatch, 0.5 * DRAW_S)
    assert ended <= 0.5 * DRAW_S  # the plan ends by its deadline
    assert chosen is placement


def test_the_bar_draws_with_their_price_left(monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, ended = _drawing(monkeypatch, 10 * DRAW_S)
    assert ended == DRAW_S  # drawn once


def test_the_plan_placed_again_is_not_weighed_on_draws_without_their_price_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    request = grouped_request()
    problem = build_problem(request)
    first = RoundRobinPolicy().plan(request, problem)
    placement = Placement(tuple(reversed(first.queues)), "HEURISTIC")
    blind = Blind(first.queues, first.finish_s)
    monkeypatch.setattr(blindbar, "_bar", lambda *args: Placement(blind.queues, "BASELINE"))
    fake = slow_stage(monkeypatch, plan_draws, "draw_matrix", DRAW_S)
    spread = spreads(request.trajectories)
    blindbar.barred(problem, request, placement, blind, "BASELINE", spread, 0.5 * DRAW_S, first, 1.0)
    assert fake.seconds <= 0.5 * DRAW_S


def _built_for_the_bar(
    monkeypatch: pytest.MonkeyPatch, deadline: float, dealt_s: float = 1.0
) -> tuple[Blind | None, float]:
    """``lpt.bar_plans`` with quantiles and an lpt phase of a second, dealing the blind plans taking
    ``dealt_s`` on the fake clock and nothing else any time: the blind plans and the time then."""
    request = grouped_request()
    problem = build_problem(request)
    assignment = [list(queue) for queue in RoundRobinPolicy().plan(request, problem).queues]
    fake = slow_stage(monkeypatch, blindbar, "_candidates", dealt_s)
    spread = spreads(request.trajectories)
    blind = lpt.bar_plans(problem, request, None, assignment, spread, deadline, 1.0)
    return blind, fake.seconds


def test_no_blind_plan_is_built_for_a_bar_with_no_time_left_to_draw(monkeypatch: pytest.MonkeyPatch) -> None:
    blind, ended = _built_for_the_bar(monkeypatch, 1.5)  # time to build them, not to draw after
    assert blind is None
    assert ended == 0.0


def test_the_blind_plans_are_built_where_they_and_the_draws_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    blind, ended = _built_for_the_bar(monkeypatch, 10.0)
    assert blind is not None
    assert ended == 1.0  # dealt


def test_blind_plans_that_outrun_their_price_are_dropped_when_the_draws_must_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    blind, ended = _built_for_the_bar(monkeypatch, 4.5, dealt_s=3.8)  # the draws start by 3.5
    assert ended == 3.8
    assert blind is None  # not kept past the draws' start, though dealt before the deadline


@pytest.mark.parametrize("policy", [lpt.LptPolicy(), CpSatPolicy()], ids=["lpt", "cpsat"])
@pytest.mark.parametrize(("budget_s", "built"), [(2.5, False), (10.0, True)])
def test_the_bars_blind_plans_are_priced_in_the_lpt_phase(
    monkeypatch: pytest.MonkeyPatch, policy: LptPolicy | CpSatPolicy, budget_s: float, built: bool
) -> None:
    slow_lpt_phase(monkeypatch, lpt)  # the lpt start takes a second; nothing else takes any time
    dealt = count_calls(monkeypatch, blindbar, "_candidates")
    policy.plan(dataclasses.replace(grouped_request(), time_budget_s=budget_s))
    assert bool(dealt) is built  # at 1 s of 2.5: the plans' phase and the draws' would end at 3 s


@pytest.mark.parametrize("policy", [lpt.LptPolicy(), CpSatPolicy()], ids=["lpt", "cpsat"])
def test_the_bars_draws_are_priced_in_the_lpt_phase(
    monkeypatch: pytest.MonkeyPatch, policy: LptPolicy | CpSatPolicy
) -> None:
    fake = slow_lpt_phase(monkeypatch, lpt)  # the lpt start takes a second
    floor = blindbar._floor

    def slow_floor(*args: Any) -> float:  # and each blind plan's floor one more, after its check
        fake.seconds += 1.0
        return floor(*args)

    monkeypatch.setattr(blindbar, "_floor", slow_floor)
    asked = count_calls(monkeypatch, blindbar, "outlived")  # the bar's first play of its draws
    weighed = count_calls(monkeypatch, blindbar, "least_drawn")
    left = blindbar.DRAWS_COST - plan_draws.DRAWING  # the least the draws cost: every row in hand
    policy.plan(dataclasses.replace(grouped_request(), time_budget_s=3.0 + 0.9 * left))
    assert fake.seconds == 3.0  # both blind plans built (the first checked at 1.0, the second at 2.0)
    assert asked == weighed == []  # reached at 3.0 with less than their price left, no draw played

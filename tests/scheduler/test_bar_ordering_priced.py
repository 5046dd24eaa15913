"""The bar's ordering (``blindbar._bar``: each queue's fastest order, on the quantile path) stops by
the plan's deadline at its measured pace, and the plan stands where it has no time (review50a).

Unpriced, it ordered every queue whatever was left: budget50 saw it end 4,096 x 32 plans at 80.7 ms
of the service's 80 ms default. Here every play of a queue takes 10 ms on a fake clock and nothing
else takes any time, so what the bar spends is its plays alone.
"""

from __future__ import annotations

from typing import Any

import pytest

from scheduler import clock
from scheduler.policies import blindbar
from scheduler.policies.base import Placement
from scheduler.policies.blindbar import Blind
from scheduler.policies.problem import Problem, build_problem
from scheduler.policies.robust import spreads
from scheduler.policies.round_robin import RoundRobinPolicy
from tests.scheduler.fake_clock import ManualClock
from tests.scheduler.test_robust_fast import _request

PLAY_S = 0.01  # what one play of a queue takes on the fake clock


def _barred(monkeypatch: pytest.MonkeyPatch, deadline: float) -> tuple[Placement, Placement, float]:
    """A plan later on the predictions than its blind plan, whose queues run in waves (8 slots,
    16 trajectories a worker), through the bar with ``deadline``: the plan given, the plan returned,
    and the fake clock's time when the bar returned. The draws are not asked (``outlived``)."""
    request = _request(slots=8)
    problem = build_problem(request)
    placement = RoundRobinPolicy().plan(request, problem)
    blind = Blind(placement.queues, tuple(0.0 for _ in placement.queues))  # ends before any plan
    monkeypatch.setattr(blindbar, "outlived", lambda *args: False)
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


def test_a_bar_with_time_orders_every_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, ended = _barred(monkeypatch, 1e9)
    workers = len(build_problem(_request(slots=8)).costs)
    assert ended >= workers * PLAY_S  # every queue played at least once
    assert ended > 1.5 * PLAY_S  # so the deadline above cuts this ordering short

"""With quantiles the length-blind plans are built for the bar, after the at-once hedge
(``lpt.bar_plans``): they are read nowhere before the bar there, and at 4,096 x 32 building them first
took 6-11 ms of the service's 80 ms before a judgment that then went out unjudged (docs/experiments.md,
budget50). Without quantiles they are still built at the start, which they may be.
"""

from __future__ import annotations

import dataclasses

import pytest

from scheduler import clock
from scheduler.planner import plan
from scheduler.policies import blindbar, cpsat, lpt, robust_fast
from scheduler.policies.blindbar import blind_start
from scheduler.types import PlanRequest
from tests.scheduler.fake_clock import count_calls, slow_stage
from tests.scheduler.mixed_requests import grouped_request

BUDGET_S = 100.0


def _policy(name: str) -> lpt.LptPolicy | cpsat.CpSatPolicy:
    return lpt.LptPolicy() if name == "lpt" else cpsat.CpSatPolicy()


@pytest.mark.parametrize("policy", ["lpt", "cpsat"])
def test_blind_plans_that_take_the_whole_budget_leave_the_at_once_hedge_its_judgment(
    policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # built at the start, they spent the budget and the plan went out unjudged with samples on the
    # Ascends; built for the bar, the judgment comes first, and the bar past the deadline keeps it
    request = dataclasses.replace(grouped_request(), time_budget_s=BUDGET_S)
    fake = slow_stage(monkeypatch, blindbar, "blind_plan", BUDGET_S)  # for the bar (``drawn_blind_plan``)
    monkeypatch.setattr(lpt, "blind_plan", blindbar.blind_plan)  # and at the start (without quantiles)
    planned = _policy(policy).plan(request)
    assert planned.at_once == robust_fast.FASTEST
    assert planned.queues[2:] == ((), ())  # nothing on the Ascends
    assert fake.seconds <= 2 * BUDGET_S  # the blind plans' one call, no more


def test_with_quantiles_the_bar_still_holds_the_plan_to_the_blind_plans(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built = count_calls(monkeypatch, lpt, "drawn_blind_plan")  # priced for the bar's draws (review50a)
    judged = count_calls(monkeypatch, blindbar, "_bar")
    with clock.frozen():
        plan(grouped_request(), "lpt")
    assert built == [1]
    assert judged == [1]


def test_without_quantiles_the_blind_plans_are_built_at_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    # there the faster blind plan is the start where it beats LPT's (``blindbar.blind_start``)
    request: PlanRequest = grouped_request(quantiles=False)
    starts: list[int] = []
    built = count_calls(monkeypatch, lpt, "blind_plan")

    def recorded(*args: object) -> object:
        starts.append(len(built))
        return blind_start(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(lpt, "blind_start", recorded)
    with clock.frozen():
        plan(request, "lpt")
    assert starts == [1]  # built once, before the start was chosen
    assert built == [1]

"""Several policies planned from one preparation give the plans each would give alone."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings

from scheduler import clock
from scheduler.benchgen import bench_request
from scheduler.errors import InvalidInputError
from scheduler.planner import plan, prepare
from scheduler.types import Plan, PlanRequest
from tests.scheduler.plan_strategies import plan_requests

HEURISTICS = ("round_robin", "least_loaded", "lpt")


def _content(result: Plan) -> tuple[object, ...]:
    """Everything a plan says except how long it took to say it."""
    return (result.policy, result.workers, result.predicted_makespan_s, result.lower_bound_s,
            result.status, result.dispatch_order)  # fmt: skip


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan_requests())
def test_plans_from_one_preparation_equal_the_plans_made_alone(request: PlanRequest) -> None:
    # On the frozen clock: on the wall clock a prepared plan's budget counts from its preparation, so on
    # a busy host (parallel test workers) lpt's hedge could fit alone and not after it, and the plans
    # differ for the host's sake, not the preparation's (seen as a Hypothesis FlakyFailure under xdist)
    with clock.frozen():
        prepared = prepare(request)
        for name in HEURISTICS:
            assert _content(plan(request, name, prepared=prepared)) == _content(plan(request, name)), name


def test_the_shared_bound_is_the_bound_every_plan_reports() -> None:
    request = bench_request(256, 8, seed=3)
    prepared = prepare(request)
    for name in (*HEURISTICS, "cpsat"):
        assert plan(request, name, prepared=prepared).lower_bound_s == prepared.bound.value_s


def test_a_preparation_is_refused_for_another_request() -> None:
    request = bench_request(64, 4, seed=0)
    other = dataclasses.replace(request, seed=1)
    with pytest.raises(ValueError, match="another request"):
        plan(other, "lpt", prepared=prepare(request))


def test_prepare_refuses_a_bad_request_naming_the_field() -> None:
    request = bench_request(64, 4, seed=0)
    bad = dataclasses.replace(request, trajectories=(*request.trajectories, request.trajectories[0]))
    with pytest.raises(InvalidInputError) as caught:
        prepare(bad)
    assert caught.value.field == "trajectories[64]"


def test_the_budget_counts_from_the_preparation_so_a_spent_budget_keeps_the_lpt_plan() -> None:
    request = dataclasses.replace(bench_request(1_024, 16, seed=0), time_budget_s=0.001)
    result = plan(request, "cpsat", prepared=prepare(request))
    assert result.status == "FALLBACK_LPT"
    assert result.predicted_makespan_s == plan(request, "lpt").predicted_makespan_s

"""The at-once hedge's candidate written out for unpinned single trajectories
(``fastest_plain.plain_fastest``) is the general loop's (``robust_fast._fastest``): the same units on
the same workers, the same None where some unit fits no worker at once, the same give-up at its pace.
It exists only to be cheaper (7.7 ms of the judgment at 4,096 x 32: docs/experiments.md, budget50).
"""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import HealthCheck, given, settings

from scheduler import clock
from scheduler.policies import robust_fast
from scheduler.policies.fastest_plain import PACE_EVERY
from scheduler.policies.load import rates
from scheduler.policies.problem import Problem, build_problem
from scheduler.types import Inventory, PlanRequest
from tests.scheduler.fake_clock import SteppingClock
from tests.scheduler.mixed_requests import grouped_request, service_batch
from tests.scheduler.plan_strategies import plan_requests


def _general(problem: Problem) -> Problem:
    """``problem`` as the general loop sees it (every unit still allows every active worker)."""
    return dataclasses.replace(problem, unrestricted=False)


@pytest.mark.parametrize(
    "request_",
    [
        grouped_request(),
        grouped_request(h100s=3, ascends=1, slots=20),
        service_batch(64, 16, seed=2),
        service_batch(96, 4, 7),
    ],
)
def test_the_written_out_candidate_is_the_general_loops(request_: PlanRequest) -> None:
    problem = build_problem(request_)
    assert problem.unrestricted
    assert robust_fast.fastest_first(problem) == robust_fast.fastest_first(_general(problem))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan_requests(max_groups=12, max_workers=5, max_samples=8, affinity=False))
def test_any_unpinned_batch_gets_the_general_loops_candidate(request: PlanRequest) -> None:
    problem = build_problem(request)
    if not problem.unrestricted:
        return  # pins or caches restrict some trajectory: the general loop places it, as before
    assert robust_fast.fastest_first(problem) == robust_fast.fastest_first(_general(problem))


def test_the_written_out_candidate_gives_up_where_the_general_loop_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    problem = build_problem(service_batch(64, 16, seed=2))  # 1,024 units: 32 pace checks
    answers = []
    for each in (problem, _general(problem)):
        monkeypatch.setattr(clock, "now", SteppingClock().now)  # a second a reading
        answers.append(robust_fast._fastest(each, 40.0))
    assert answers[0] is robust_fast.LATE
    assert answers[1] is robust_fast.LATE
    monkeypatch.setattr(clock, "now", SteppingClock().now)
    assert robust_fast._fastest(problem, math.inf) is not robust_fast.LATE


def test_a_batch_no_cache_holds_at_once_gets_no_candidate_as_from_the_general_loop() -> None:
    problem = build_problem(grouped_request(long_cot=True))  # 256 chains of ~20k tokens: no unit left out
    assert problem.unrestricted
    assert robust_fast.fastest_first(problem) is None
    assert robust_fast.fastest_first(_general(problem)) is None


@pytest.mark.parametrize("cache_tokens", [12_000, 16_000])
def test_where_the_cache_binds_the_written_out_candidate_is_the_general_loops(cache_tokens: int) -> None:
    request = grouped_request()
    workers = tuple(
        dataclasses.replace(w, kv_capacity_tokens=cache_tokens) for w in request.inventory.workers
    )
    request = dataclasses.replace(request, inventory=Inventory(workers, request.inventory.model))
    problem = build_problem(request)
    placed = robust_fast.fastest_first(problem)
    assert placed is not None
    assert all(placed)  # every worker takes some: the cache, not the speed, spreads it
    assert placed == robust_fast.fastest_first(_general(problem))


def test_a_candidate_asked_past_its_deadline_is_given_up_before_its_first_unit() -> None:
    request = grouped_request()
    problem = build_problem(dataclasses.replace(request, trajectories=request.trajectories[:16]))
    assert problem.unrestricted
    assert len(problem.units) < PACE_EVERY  # one pace check: the first
    late = clock.now() - 1.0
    assert robust_fast._fastest(problem, late) is robust_fast.LATE
    assert robust_fast._fastest(_general(problem), late) is robust_fast.LATE


@pytest.mark.parametrize("tflops_share", [0.0005, 0.001])
def test_where_compute_binds_the_written_out_candidate_is_the_general_loops(tflops_share: float) -> None:
    # devices with a share of their FLOP/s: each worker's estimate is its compute, which counts every
    # token it holds, so its load's token total, not only its longest steps, orders the heap
    request = grouped_request()
    workers = tuple(
        dataclasses.replace(
            w, device=dataclasses.replace(w.device, peak_tflops=w.device.peak_tflops * tflops_share)
        )
        for w in request.inventory.workers
    )
    request = dataclasses.replace(request, inventory=Inventory(workers, request.inventory.model))
    problem = build_problem(request)
    assert problem.unrestricted
    assert all(
        rates(problem.costs[w]).seq_s > rates(problem.costs[w]).step_s for w in problem.active
    )  # a sequence's compute outweighs a step's memory: compute-bound
    placed = robust_fast.fastest_first(problem)
    assert placed is not None
    assert placed == robust_fast.fastest_first(_general(problem))

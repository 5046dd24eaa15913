"""Where cpsat runs the plateau pass (``CpSatPolicy._search``): on a searched plan of point predictions
only. Found by mutation testing of round 66's code (docs/experiments.md, "Mutation testing of round
66's new code"): test_cpsat and test_above_others passed with the pass run on the lpt plan where it
stands (``FALLBACK_LPT``) and on a request with quantiles, whose plans are judged on draws, not plays.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from scheduler import clock
from scheduler.benchgen import bench_request
from scheduler.devices import device_profile, model_preset
from scheduler.planner import plan
from scheduler.policies import cpsat
from scheduler.policies.plateau import lower
from scheduler.types import Inventory, PlanRequest, Trajectory, Worker


def _passes(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Each plateau pass cpsat runs: whether it lowered the plan."""
    ran: list[bool] = []

    def spied(*args: Any) -> Any:
        lowered = lower(*args)
        ran.append(lowered is not None)
        return lowered

    monkeypatch.setattr(cpsat, "lower", spied)
    return ran


def test_a_searched_plan_of_point_predictions_is_offered_to_the_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    ran = _passes(monkeypatch)
    with clock.frozen():
        result = plan(dataclasses.replace(bench_request(256, 8, seed=1), time_budget_s=1.0), "cpsat")
    assert result.status in {"OPTIMAL", "FEASIBLE"}
    assert len(ran) == 1


def test_where_the_lpt_plan_stands_the_pass_does_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight equal trajectories on four equal workers: the search keeps lpt's plan, which stands as
    ``lpt`` returns it."""
    workers = tuple(Worker(f"w{i}", device_profile("H100"), max_num_seqs=64) for i in range(4))
    trajectories = tuple(Trajectory(f"p{i}", 0, 100, 4_000, 2_000.0) for i in range(8))
    ran = _passes(monkeypatch)
    with clock.frozen():
        result = plan(
            PlanRequest(trajectories, Inventory(workers, model_preset("7b")), time_budget_s=1.0), "cpsat"
        )
    assert result.status == "FALLBACK_LPT"
    assert ran == []


def test_a_request_with_quantiles_is_not_lowered_by_plays(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its plan is chosen on draws of the lengths (``robust``): a pass judged on the point predictions
    would move it unjudged."""
    request = bench_request(256, 8, seed=1)
    spread = tuple(
        dataclasses.replace(t, quantiles={0.5: t.predicted_tokens, 0.9: 1.5 * t.predicted_tokens})
        for t in request.trajectories
    )
    ran = _passes(monkeypatch)
    with clock.frozen():
        plan(dataclasses.replace(request, trajectories=spread, time_budget_s=1.0), "cpsat")
    assert ran == []

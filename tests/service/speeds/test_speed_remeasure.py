"""A worker believed too slow to be given work is measured again, so a wrong belief cannot last.

The learner sees only the workers that ran something: a worker learned as 20x slow (a bad day, a
noisy neighbour since gone) was given nothing by every later plan, and so never sent the actual that
would have corrected it. Each published plan that leaves such a worker idle now pulls its learned
scale towards its peers' (its profile's when none is measured), until a plan gives it work again
and its actuals re-measure it.
"""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from scheduler.devices import device_profile, model_preset
from scheduler.types import Worker
from service.api.learning_schemas import ActualReport
from service.speeds.model import modelled_seconds
from tests.service.api_helpers import actual_report, batch_body

STEPS = 5  # plans within which a worker learned 20x slow gets work again


def _learn_w0(client: TestClient, slowdown: float) -> None:
    """w0 measured ``slowdown`` x its profile, w1 on time: each believed by its own actuals (a worker
    never measured would borrow w0's scale, ``learned_fleet``, and no belief would single w0 out)."""
    client.post("/schedule", json=batch_body(workers=2))
    slow = [actual_report(0, p, 0, worker="w0", slowdown=slowdown) for p in range(8)]
    on_time = [_on_time_on_the_ascend(actual_report(0, p, 1, worker="w1")) for p in range(8)]
    learned = client.post("/actuals", json={"actuals": slow + on_time}).json()["time_scales"]
    assert abs(learned["w0"] - slowdown) < 1e-6


def _on_time_on_the_ascend(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` as run by w1, an Ascend 910B, in the time its profile models (scale 1)."""
    ascend = Worker("w1", device_profile("Ascend910B"), max_num_seqs=64)
    report["wall_time_s"] = modelled_seconds(ascend, model_preset("7b"), ActualReport.model_validate(report))
    return report


def _reports(step: int, queue: list[dict[str, Any]], worker: str) -> list[dict[str, Any]]:
    """The actuals of ``queue`` run on time (the worker has recovered)."""
    return [
        actual_report(step, int(item["prompt_id"][1:]), item["sample_idx"], worker=worker) for item in queue
    ]


def test_a_worker_learned_very_slow_that_recovered_is_measured_again_within_a_few_steps(
    client: TestClient,
) -> None:
    _learn_w0(client, slowdown=20.0)
    plans = [client.post("/schedule", json=batch_body(workers=2)).json() for _ in range(STEPS)]
    assert all(plan["time_scale_sources"]["w0"] == "learned" for plan in plans)
    step = next((s for s, plan in enumerate(plans) if plan["assignments"]["w0"]), None)
    assert step is not None, f"w0 was given no work in {STEPS} plans: its 20x is never measured again"
    assert plans[step]["time_scales"]["w0"] < 20.0
    measured = client.post(
        "/actuals", json={"actuals": _reports(step, plans[step]["assignments"]["w0"], "w0")}
    )
    assert measured.json()["time_scales"]["w0"] < 2.0  # re-measured: on time again


def test_a_worker_given_work_keeps_its_learned_speed_from_plan_to_plan(client: TestClient) -> None:
    _learn_w0(client, slowdown=1.2)  # slower than its profile, still worth work
    for _ in range(3):
        plan = client.post("/schedule", json=batch_body(workers=2)).json()
        assert plan["assignments"]["w0"]
        assert abs(plan["time_scales"]["w0"] - 1.2) < 1e-6  # no report yet: nothing new to learn


def test_a_drained_worker_keeps_its_learned_speed(client: TestClient) -> None:
    _learn_w0(client, slowdown=20.0)
    drained = batch_body(workers=2)
    drained["inventory"]["workers"][0]["drain"] = True
    for _ in range(3):
        client.post("/schedule", json=drained)  # idle because drained, not because believed slow
    plan = client.post("/schedule", json=batch_body(workers=2, publish=False)).json()
    assert abs(plan["time_scales"]["w0"] - 20.0) < 1e-6


def test_a_plan_that_is_not_published_does_not_move_a_learned_speed(client: TestClient) -> None:
    _learn_w0(client, slowdown=20.0)
    for _ in range(3):
        client.post("/schedule", json=batch_body(workers=2, publish=False))  # a dry run runs nothing
    plan = client.post("/schedule", json=batch_body(workers=2, publish=False)).json()
    assert abs(plan["time_scales"]["w0"] - 20.0) < 1e-6


def test_a_worker_believed_slow_in_a_fleet_faster_than_its_profiles_is_measured_again(
    client: TestClient,
) -> None:
    """The pull goes towards the workers that ran the step, not towards the profile's 1.0: in a fleet
    that runs 20x faster than its datasheets (engine-sim at ``--time-scale 0.01`` ran ~0.05), a
    worker learned at 2x its profile is 40x slower than its peers, and a pull towards 1.0 left it
    20x slower for good (a walk-through's H100 was pulled from 0.09 to 0.93, idle every step)."""
    client.post("/schedule", json=batch_body(workers=2))
    slow = [actual_report(0, p, 0, worker="w0", slowdown=2.0) for p in range(8)]
    fast = [_on_time_on_the_ascend(actual_report(0, p, 1, worker="w1")) for p in range(8)]
    for report in fast:
        report["wall_time_s"] *= 0.05  # the fleet runs 20x faster than its profile
    client.post("/actuals", json={"actuals": slow + fast})

    plans = [client.post("/schedule", json=batch_body(workers=2)).json() for _ in range(STEPS)]

    assert not plans[0]["assignments"]["w0"]  # believed too slow to be worth any work
    assert any(plan["assignments"]["w0"] for plan in plans), [p["time_scales"]["w0"] for p in plans]

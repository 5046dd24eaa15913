"""Workers of one profile whose learned speeds differ only by noise are planned as one kind."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from scheduler.costmodel import worker_cost
from scheduler.devices import device_profile, model_preset
from scheduler.policies.problem import worker_kinds
from scheduler.types import Worker
from service.api.schemas import ActualReport
from service.speed_groups import snap
from service.speed_model import modelled_seconds
from tests.service.api.conftest import actual_report, batch_body

STEPS = 5  # plans within which workers learned 20x slow get work again (test_speed_remeasure.py)


def _h100s(workers: int) -> dict[str, Any]:
    """A step of 256 trajectories on ``workers`` identical H100s."""
    body = batch_body(prompts=32, n=8, workers=workers)
    for spec in body["inventory"]["workers"]:
        spec["device"] = "H100"
    return body


def _measure(client: TestClient, slowdowns: dict[str, float]) -> dict[str, float]:
    """Publish a step to the fleet, then report six trajectories per worker at its ``slowdown``;
    returns each worker's own learned time scale."""
    client.post("/schedule", json=_h100s(len(slowdowns)))
    reports = [
        actual_report(0, p, j, worker=wid, slowdown=slowdown)
        for j, (wid, slowdown) in enumerate(slowdowns.items())
        for p in range(6)
    ]
    scales: dict[str, float] = client.post("/actuals", json={"actuals": reports}).json()["time_scales"]
    return scales


def _on_the_ascend(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` as run by an Ascend 910B in the time its profile models (scale 1)."""
    ascend = Worker("w1", device_profile("Ascend910B"), max_num_seqs=64)
    report["wall_time_s"] = modelled_seconds(ascend, model_preset("7b"), ActualReport.model_validate(report))
    return report


def _kinds(answer: dict[str, Any]) -> int:
    """How many kinds the planner sees among the workers of ``answer``, planned at its time scales."""
    model = model_preset("7b")
    costs = [
        worker_cost(Worker(wid, device_profile("H100"), max_num_seqs=64, time_scale=scale), model)
        for wid, scale in answer["time_scales"].items()
    ]
    return len(worker_kinds(costs, range(len(costs))))


def test_identical_workers_whose_learned_speeds_differ_by_noise_plan_as_one_kind(client: TestClient) -> None:
    _measure(client, {"w0": 1.0, "w1": 1.02, "w2": 0.98, "w3": 1.03})

    answer = client.post("/schedule", json=_h100s(4)).json()

    assert _kinds(answer) == 1
    assert set(answer["time_scale_sources"].values()) == {"learned_group"}


def test_a_straggler_twice_as_slow_keeps_its_own_speed(client: TestClient) -> None:
    _measure(client, {"w0": 1.0, "w1": 1.03, "w2": 0.98, "w3": 2.0})

    answer = client.post("/schedule", json=_h100s(4)).json()

    assert _kinds(answer) == 2
    sources, scales = answer["time_scale_sources"], answer["time_scales"]
    assert sources == {"w0": "learned_group", "w1": "learned_group", "w2": "learned_group", "w3": "learned"}
    assert scales["w3"] > 1.9 * scales["w0"]
    assert len(answer["assignments"]["w3"]) < len(answer["assignments"]["w0"])


def test_a_worker_ten_percent_slow_keeps_its_own_speed_since_planning_it_at_the_groups_costs_as_much(
    client: TestClient,
) -> None:
    """Planned at its group's speed, a worker 10% slow ends ~10% late (service/speed_groups.py)."""
    _measure(client, {"w0": 1.0, "w1": 1.01, "w2": 0.99, "w3": 1.1})

    answer = client.post("/schedule", json=_h100s(4)).json()

    sources, scales = answer["time_scale_sources"], answer["time_scales"]
    assert sources["w3"] == "learned"
    assert scales["w3"] > 1.05 * scales["w0"]


def test_grouping_workers_of_equal_learned_speeds_changes_no_plan(client: TestClient) -> None:
    own = _measure(client, dict.fromkeys(("w0", "w1", "w2", "w3"), 1.3))
    learned = client.post("/schedule", json={**_h100s(4), "publish": False}).json()
    stated = _h100s(4)  # each worker's own learned speed, stated: planned as it is, never grouped
    for spec in stated["inventory"]["workers"]:
        spec["time_scale"] = own[spec["worker_id"]]

    answer = client.post("/schedule", json={**stated, "publish": False}).json()

    assert set(learned["time_scale_sources"].values()) == {"learned_group"}
    assert learned["time_scales"] == own
    assert answer["time_scale_sources"] == dict.fromkeys(("w0", "w1", "w2", "w3"), "request")
    assert answer["assignments"] == learned["assignments"]
    assert answer["predicted_makespan_s"] == learned["predicted_makespan_s"]


def test_a_group_believed_very_slow_is_measured_again_as_a_lone_worker_is(client: TestClient) -> None:
    """Both H100s learned ~20x slow plan as one group, given nothing beside the Ascends: each published
    plan that leaves them idle pulls their scales towards the profile, as it does a lone worker's."""
    fleet = batch_body(workers=4)  # w0, w2 H100s; w1, w3 Ascend 910Bs
    client.post("/schedule", json=fleet)
    slow = [
        actual_report(0, p, s, worker=w, slowdown=20.0 + s)
        for s, w in enumerate(("w0", "w2"))
        for p in range(8)
    ]
    on_time = [
        _on_the_ascend(actual_report(0, p, 2 + s, worker=w))
        for s, w in enumerate(("w1", "w3"))
        for p in range(8)
    ]
    client.post("/actuals", json={"actuals": slow + on_time})

    plans = [client.post("/schedule", json=fleet).json() for _ in range(STEPS)]

    assert plans[0]["time_scale_sources"]["w0"] == plans[0]["time_scale_sources"]["w2"] == "learned_group"
    assert not plans[0]["assignments"]["w0"]  # believed too slow to be worth any work
    assert any(plan["assignments"]["w0"] for plan in plans), f"no work for w0 in {STEPS} plans"


def test_groups_depend_on_neither_the_order_of_the_workers_nor_their_names() -> None:
    logs = {"a": 0.02, "b": -0.03, "c": 0.05, "d": 0.69, "e": 0.0}
    weights = {"a": 40, "b": 8, "c": 12, "d": 30, "e": 8}
    reordered = dict(reversed(logs.items()))

    assert snap(logs, weights) == snap(reordered, weights)
    assert set(snap(logs, weights)) == {"a", "b", "c", "e"}  # d, 2x slow, keeps its own


def test_two_real_speed_classes_of_one_profile_plan_as_two_groups() -> None:
    throttled = {f"t{i}": 0.41 + 0.01 * i for i in range(4)}  # 1.5x slow, within noise of each other
    healthy = {f"h{i}": 0.01 * i for i in range(4)}
    logs = {**throttled, **healthy}

    groups = snap(logs, dict.fromkeys(logs, 10))

    assert len({groups[w] for w in throttled}) == len({groups[w] for w in healthy}) == 1
    assert groups["t0"] != groups["h0"]

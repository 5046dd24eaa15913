"""Workers of one profile whose learned speeds differ only by noise are planned as one kind."""

from __future__ import annotations

import math
from typing import Any

import pytest
from fastapi.testclient import TestClient

from scheduler.costmodel import worker_cost
from scheduler.devices import device_profile, model_preset
from scheduler.policies.problem import worker_kinds
from scheduler.types import Worker
from service.api.learning_schemas import ActualReport
from service.speeds.groups import majority, snap
from service.speeds.model import modelled_seconds, peer_scales
from tests.service.api_helpers import actual_report, batch_body

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
    """Planned at its group's speed, a worker 10% slow ends ~10% late (service/speeds/groups.py)."""
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
    plan that leaves them idle pulls their scales towards the Ascends', as it does a lone worker's."""
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


def test_a_worker_not_measured_yet_is_planned_like_most_of_its_peers_not_pulled_towards_a_straggler(
    client: TestClient,
) -> None:
    _measure(client, {"w0": 1.0, "w1": 1.02, "w2": 0.98, "w3": 2.0})

    answer = client.post("/schedule", json=_h100s(5)).json()  # w4: a new worker, not measured yet

    assert answer["time_scale_sources"]["w4"] == "learned_peers"
    assert answer["time_scales"]["w4"] == answer["time_scales"]["w0"]  # the group's, not nearer 2x


def test_a_profile_none_of_whose_workers_is_measured_borrows_the_fleets_largest_group_not_its_mean() -> None:
    logs = {f"h{i}": 0.01 * (i % 3) for i in range(6)} | {"slow": math.log(1.3)}
    ids = [*logs, "ascend"]
    own = {wid: (math.exp(log), 8) for wid, log in logs.items()}

    scales = peer_scales(ids, ["h100"] * len(logs) + ["910b"], own)

    assert scales["ascend"] == (scales["h0"][0], "learned_fleet")


def test_peers_lend_the_same_scale_whatever_the_order_or_names_of_the_workers() -> None:
    logs = {"a": 0.0, "b": 0.01, "c": 0.3, "d": 0.31, "e": 0.9}  # two groups of two, tied, and a loner
    lent = []
    for order in (list(logs), list(reversed(logs))):
        renamed = {f"x{order.index(wid)}": logs[wid] for wid in order}
        own = {wid: (math.exp(log), 6) for wid, log in renamed.items()}
        lent.append(peer_scales([*renamed, "new"], ["h100"] * 6, own)["new"])

    assert lent[0] == lent[1]
    assert lent[0][1] == "learned_peers"
    assert lent[0][0] == pytest.approx(math.exp(0.305))  # the group of two drawn around the median


def test_peers_none_of_whom_lie_within_noise_of_another_lend_their_weighted_median() -> None:
    logs = {"a": 0.0, "b": 0.2, "c": 0.4, "d": 0.6}

    assert majority(logs, {"a": 1, "b": 1, "c": 1, "d": 10}) == 0.6
    assert majority(logs, dict.fromkeys(logs, 1)) == 0.2

"""A learned speed is a ratio to the profile it was measured against, and is used only with it."""

from __future__ import annotations

import json
import math
from typing import Any

import redis
from fastapi.testclient import TestClient

from scheduler.devices import device_profile, model_preset
from scheduler.types import Worker
from service.api.learning_schemas import ActualReport
from service.speeds.model import modelled_seconds
from tests.service.api_helpers import actual_report, batch_body


def _fleet(w0: dict[str, Any], **extra: Any) -> dict[str, Any]:
    body = batch_body(workers=2, **extra)
    body["inventory"]["workers"][0].update(w0)
    return body


def _of(schedule_id: str, report: dict[str, Any]) -> dict[str, Any]:
    return {**report, "schedule_id": schedule_id}


def _learn_w0_twice_as_slow(client: TestClient) -> None:
    client.post("/schedule", json=batch_body(workers=2))  # w0 published as an H100
    slow = [actual_report(0, p, 0, worker="w0", slowdown=2.0) for p in range(6)]
    assert abs(client.post("/actuals", json={"actuals": slow}).json()["time_scales"]["w0"] - 2.0) < 1e-6


def test_a_worker_restarted_on_another_device_is_planned_by_its_new_profile(client: TestClient) -> None:
    _learn_w0_twice_as_slow(client)
    answer = client.post("/schedule", json=_fleet({"device": "H200"})).json()
    assert answer["time_scales"]["w0"] == 1.0  # not the H100's 2.0 applied to an H200
    assert answer["time_scale_sources"]["w0"] == "profile"


def test_a_measured_bandwidth_override_is_not_slowed_again_by_the_speed_learned_without_it(
    client: TestClient,
) -> None:
    # the operator measured what the learner had found (half the bandwidth): applying both would
    # plan w0 four times slower than its profile
    _learn_w0_twice_as_slow(client)
    answer = client.post("/schedule", json=_fleet({"hbm_bandwidth_gbs": 1675.0})).json()
    assert answer["time_scale_sources"]["w0"] == "profile"
    assert answer["time_scales"]["w0"] == 1.0


def test_the_first_batch_measured_on_a_new_device_starts_its_speed_afresh(client: TestClient) -> None:
    _learn_w0_twice_as_slow(client)
    client.post("/schedule", json=_fleet({"device": "H200"}))  # published: w0 is now an H200
    # the same wall times on an H200 are a different ratio; the H100's 2.0 must not be blended in
    reports = [actual_report(1, p, 0, worker="w0") for p in range(6)]
    learned = client.post("/actuals", json={"actuals": reports}).json()["time_scales"]["w0"]
    again = client.post("/schedule", json=_fleet({"device": "H200"})).json()
    assert again["time_scale_sources"]["w0"] == "learned"
    assert abs(again["time_scales"]["w0"] - learned) < 1e-9
    h200 = Worker("w0", device_profile("H200"), max_num_seqs=64)
    modelled = [modelled_seconds(h200, model_preset("7b"), ActualReport.model_validate(r)) for r in reports]
    ratios = [r["wall_time_s"] / m for r, m in zip(reports, modelled, strict=True)]
    fresh = math.exp(sum(m * math.log(x) for m, x in zip(modelled, ratios, strict=True)) / sum(modelled))
    assert abs(learned - fresh) < 1e-6  # this batch's ratio to the H200 alone, nothing of the H100's 2.0
    back = client.post("/schedule", json=batch_body(workers=2)).json()  # the old H100 ratio is gone too
    assert back["time_scale_sources"]["w0"] == "profile"


def test_the_same_profile_keeps_its_learned_speed(client: TestClient) -> None:
    _learn_w0_twice_as_slow(client)
    answer = client.post("/schedule", json=_fleet({"max_num_seqs": 32, "kv_capacity_tokens": 500_000})).json()
    assert answer["time_scale_sources"]["w0"] == "learned"  # slots and KV size do not change step time
    assert abs(answer["time_scales"]["w0"] - 2.0) < 1e-6


def test_a_memory_override_keeps_the_learned_speed(client: TestClient) -> None:
    # device memory sets only the KV capacity, which does not change step time: as a
    # kv_capacity_tokens override, a memory_gib one must not throw the learned scale away
    _learn_w0_twice_as_slow(client)
    answer = client.post("/schedule", json=_fleet({"memory_gib": 70.0})).json()
    assert answer["time_scale_sources"]["w0"] == "learned"
    assert abs(answer["time_scales"]["w0"] - 2.0) < 1e-6


def test_a_late_report_teaches_nothing_to_the_profile_its_worker_moved_to_since(client: TestClient) -> None:
    # the trainer publishes step 1 (w0 now an H200) before it reports step 0 (run on an H100): the
    # H100's timings, read against the H200's model, would teach the H200 a wrong scale
    client.post("/schedule", json=batch_body(workers=2, schedule_id="step0"))
    client.post("/schedule", json=_fleet({"device": "H200"}, schedule_id="step1"))
    late = [_of("step0", actual_report(0, p, 0, worker="w0", slowdown=2.0)) for p in range(6)]
    assert "w0" not in client.post("/actuals", json={"actuals": late}).json()["time_scales"]
    plan = client.post("/schedule", json=_fleet({"device": "H200"})).json()
    assert plan["time_scale_sources"]["w0"] == "profile"
    on_h200 = [_of("step1", actual_report(1, p, 0, worker="w0")) for p in range(6)]
    assert "w0" in client.post("/actuals", json={"actuals": on_h200}).json()["time_scales"]


def test_a_report_of_a_step_planned_on_the_current_profile_is_learned(client: TestClient) -> None:
    client.post("/schedule", json=batch_body(workers=2, schedule_id="step0"))
    client.post("/schedule", json=batch_body(workers=2, schedule_id="step1"))  # the same H100
    late = [_of("step0", actual_report(0, p, 0, worker="w0", slowdown=2.0)) for p in range(6)]
    assert abs(client.post("/actuals", json={"actuals": late}).json()["time_scales"]["w0"] - 2.0) < 1e-6


def test_a_speed_stored_before_profiles_were_fingerprinted_is_not_applied(
    client: TestClient, redis_client: redis.Redis
) -> None:
    # the profile it was measured against is unknown: the worker may run on other hardware since
    client.post("/schedule", json=batch_body(workers=2))
    redis_client.hset("rs:speed", "w0", json.dumps({"log_scale": math.log(3.0), "samples": 40}))
    answer = client.post("/schedule", json=batch_body(workers=2, publish=False)).json()
    assert answer["time_scale_sources"]["w0"] == "profile"
    assert answer["time_scales"]["w0"] == 1.0
    reports = [actual_report(0, p, 0, worker="w0") for p in range(6)]
    learned = client.post("/actuals", json={"actuals": reports}).json()["time_scales"]["w0"]
    stored = json.loads(str(redis_client.hget("rs:speed", "w0")))
    assert stored["samples"] == 6  # started afresh, the unknown 3.0 not blended in
    assert abs(learned - 1.0) < 1e-6

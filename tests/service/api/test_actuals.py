"""Actuals: stored durably and once, teach per-worker speed, feed the next predictions."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from scheduler.devices import device_profile, model_preset
from scheduler.types import Worker
from service.api.learning_schemas import ActualReport
from service.delivery import keys
from service.speeds.model import modelled_seconds
from tests.service.api_helpers import AppFactory, actual_history, actual_report, batch_body


def test_actuals_are_appended_to_the_durable_stream(client: TestClient, redis_client: redis.Redis) -> None:
    response = client.post("/actuals", json={"actuals": actual_history(steps=1)})
    assert response.status_code == 200
    assert response.json()["accepted"] == 32
    assert redis_client.xlen("rs:actuals") == 32


def test_a_bad_report_in_a_batch_stores_nothing(client: TestClient, redis_client: redis.Redis) -> None:
    reports = actual_history(steps=1)
    reports[5]["output_tokens"] = 0
    response = client.post("/actuals", json={"actuals": reports})
    assert response.status_code == 422
    assert response.json()["field"] == "actuals[5].output_tokens"
    assert redis_client.exists("rs:actuals") == 0


@pytest.mark.parametrize(
    ("field", "value"),
    [("step", 2**70), ("prompt_tokens", 10**30), ("sample_idx", 2**63), ("output_tokens", 2**31)],
)
def test_a_count_past_the_bound_is_refused_and_the_service_keeps_working(
    field: str, value: int, client: TestClient, redis_client: redis.Redis
) -> None:
    report = actual_report(0, 1, 0)
    report[field] = value
    response = client.post("/actuals", json={"actuals": [report]})
    assert response.status_code == 422
    assert response.json()["field"] == f"actuals[0].{field}"
    assert redis_client.exists("rs:actuals") == 0
    assert client.post("/schedule", json=batch_body(publish=False)).status_code == 200


def test_reports_naming_more_features_in_all_than_a_history_holds_are_refused(
    client: TestClient, redis_client: redis.Redis
) -> None:
    # each name is a dense column over every history row of every replica: a worker sending fresh
    # names grew each replica by rows x names floats (~1 GB from 900 rows), kept in the stream for good
    reports = [actual_report(0, p, 0) for p in range(2)]
    for p, report in enumerate(reports):
        report["features"] = {f"p{p}_f{j}": 1.0 for j in range(40)}
    response = client.post("/actuals", json={"actuals": reports})
    assert response.status_code == 422
    assert response.json()["field"] == "actuals"
    assert "80 distinct features" in response.json()["detail"]
    assert redis_client.exists("rs:actuals") == 0


@pytest.mark.parametrize(
    "schedule_id",
    ["run-7.step:12_a", "run/7", "run@7", "a+b=c", "x" * 200, "x" * 201, "x" * 256, "x" * 257],
)
def test_a_report_names_a_schedule_id_by_the_rule_the_schedule_endpoint_keeps(
    schedule_id: str, client: TestClient, redis_client: redis.Redis
) -> None:
    planned = client.post("/schedule", json=batch_body(schedule_id=schedule_id, publish=False))
    report = actual_report(1, 0, 0) | {"schedule_id": schedule_id}
    reported = client.post("/actuals", json={"actuals": [report]})
    assert (reported.status_code, planned.status_code) in {(200, 200), (422, 422)}, reported.text
    if reported.status_code == 422:
        assert (reported.json()["field"], redis_client.exists("rs:actuals")) == ("actuals[0].schedule_id", 0)


def test_an_output_longer_than_its_cap_is_refused(client: TestClient, redis_client: redis.Redis) -> None:
    report = actual_report(0, 1, 0)
    report["output_tokens"] = report["max_new_tokens"] + 1
    response = client.post("/actuals", json={"actuals": [report]})
    assert response.status_code == 422
    cap = report["max_new_tokens"]
    assert response.json()["detail"].startswith(f"actuals[0].max_new_tokens={cap}: must be >= output_tokens=")
    problem = response.json()  # names the report's field at fault and its value, not the whole report
    assert (problem["field"], problem["value"]) == ("actuals[0].max_new_tokens", report["max_new_tokens"])
    assert redis_client.exists("rs:actuals") == 0


def test_a_stored_report_that_no_longer_reads_is_skipped_not_fatal(
    client: TestClient, redis_client: redis.Redis
) -> None:
    poisoned = {**actual_report(0, 1, 0), "step": 2**70}  # stored before the API bounded its counts
    redis_client.xadd("rs:actuals", {"a": json.dumps(poisoned)})
    response = client.post("/actuals", json={"actuals": actual_history(steps=1)})
    assert response.status_code == 200
    assert client.post("/models/retrain").status_code == 200
    assert client.get("/models").json()["history_rows"] == 32
    assert client.post("/schedule", json=batch_body(step=1, publish=False)).status_code == 200


def test_the_history_a_replica_holds_is_capped_like_the_actuals_stream(make_client: AppFactory) -> None:
    # a replica started later reads only what the capped stream keeps: one running for weeks must
    # hold no more, or its memory and retrain time grow without end and the replicas disagree
    client = make_client(actuals_maxlen=40)
    for step in range(4):
        reports = [actual_report(step, p, i) for p in range(8) for i in range(4)]
        assert client.post("/actuals", json={"actuals": reports}).status_code == 200
    assert client.get("/models").json()["history_rows"] == 40


def test_replicas_hold_the_same_history_past_the_cap_whether_followed_or_loaded_afresh(
    make_client: AppFactory, redis_client: redis.Redis
) -> None:
    # XADD MAXLEN ~ leaves the stream anything from the cap to a node more: a replica restarted
    # against it held 518 rows where its peers held 500, and predicted differently (916 vs 935)
    following = make_client(actuals_maxlen=100)
    for step in range(15):
        reports = [actual_report(step, p, i) for p in range(8) for i in range(1 + step % 4)]
        assert following.post("/actuals", json={"actuals": reports}).status_code == 200
    assert redis_client.xlen("rs:actuals") > 100  # the stream kept more than the cap
    restarted = make_client(actuals_maxlen=100)
    assert following.get("/models").json()["history_rows"] == 100
    assert restarted.get("/models").json()["history_rows"] == 100
    body = batch_body(step=15, publish=False)
    assert _predicted(following.post("/schedule", json=body).json()) == _predicted(
        restarted.post("/schedule", json=body).json()
    )


def _predicted(answer: dict[str, Any]) -> dict[tuple[str, int], int]:
    return {
        (item["prompt_id"], item["sample_idx"]): item["predicted_tokens"]
        for queue in answer["assignments"].values()
        for item in queue
    }


def test_a_retried_batch_is_stored_and_learned_from_once_whichever_replica_gets_it(
    make_client: AppFactory, redis_client: redis.Redis
) -> None:
    # docs/api.md calls the retry safe, yet each copy counted again in every replica's history (the
    # next step's predictions moved 14% for one prompt) and in the worker's learned speed
    first, second = make_client(), make_client()
    first.post("/schedule", json=batch_body(workers=2))  # the service learns the workers' profiles
    reports = actual_history(steps=1)
    answer = first.post("/actuals", json={"actuals": reports}).json()
    assert (answer["accepted"], answer["stream_length"]) == (32, 32)
    speed = redis_client.hget("rs:speed", "w0")
    body = batch_body(step=1, publish=False)
    before = _predicted(second.post("/schedule", json=body).json())
    reordered = [dict(reversed(report.items())) for report in reports]  # same reports, other key order
    for replica, batch in ((second, reports), (first, reordered)):
        again = replica.post("/actuals", json={"actuals": batch}).json()
        assert (again["accepted"], again.get("repeated"), again["stream_length"]) == (0, 32, 32)
        assert again["time_scales"] == {}
    assert redis_client.xlen("rs:actuals") == 32
    assert redis_client.hget("rs:speed", "w0") == speed  # samples and scale untouched
    for replica in (first, second):
        assert replica.get("/models").json()["history_rows"] == 32
        assert _predicted(replica.post("/schedule", json=body).json()) == before


def test_a_batch_mixing_new_and_repeated_reports_stores_only_the_new_ones(
    client: TestClient, redis_client: redis.Redis
) -> None:
    client.post("/schedule", json=batch_body(workers=2))
    old = actual_history(steps=1)
    client.post("/actuals", json={"actuals": old})
    new = [actual_report(1, p, 0, slowdown=2.0) for p in range(8)]
    answer = client.post("/actuals", json={"actuals": [*old[:5], *new, new[3]]}).json()  # one new twice
    assert (answer["accepted"], answer.get("repeated"), answer["stream_length"]) == (8, 6, 40)
    samples = json.loads(redis_client.hget("rs:speed", "w0") or "{}")["samples"]
    assert samples == 32 + 8  # the new reports taught speed, each once
    assert client.get("/models").json()["history_rows"] == 40


@pytest.mark.parametrize("named_first", [True, False])
def test_a_report_resent_with_or_without_its_schedule_id_is_stored_and_learned_from_once(
    named_first: bool, client: TestClient, redis_client: redis.Redis
) -> None:
    # the schedule id names the publish that ran a trajectory, not the trajectory: sent once with it
    # and once without, the same report was stored twice and moved the learned speed twice
    sid = client.post("/schedule", json=batch_body(workers=2)).json()["schedule_id"]
    reports = [dict(actual_report(0, p, 0, slowdown=2.0), schedule_id=sid) for p in range(6)]
    bare = [{k: v for k, v in report.items() if k != "schedule_id"} for report in reports]
    first, then = (reports, bare) if named_first else (bare, reports)
    assert client.post("/actuals", json={"actuals": first}).json()["accepted"] == 6
    speed = redis_client.hget("rs:speed", "w0")
    again = client.post("/actuals", json={"actuals": then}).json()
    assert (again["accepted"], again["repeated"], again["stream_length"]) == (0, 6, 6)
    assert redis_client.hget("rs:speed", "w0") == speed  # samples and scale untouched
    assert client.get("/models").json()["history_rows"] == 6


def test_a_retry_of_a_report_an_older_release_stored_is_still_a_retry(
    client: TestClient, redis_client: redis.Redis
) -> None:
    # releases before 2026-12-05 recorded a digest of every field, schedule_id too; a retry that
    # lands on an upgraded replica mid-roll must find it
    report = dict(actual_report(0, 1, 0), schedule_id="step-0")
    canonical = json.dumps(
        ActualReport.model_validate(report).model_dump(mode="json", exclude_none=True),
        sort_keys=True,
        separators=(",", ":"),
    )
    redis_client.xadd("rs:actuals", {"a": json.dumps(report)})
    redis_client.zadd(
        keys.actuals_seen(), {hashlib.blake2b(canonical.encode(), digest_size=16).hexdigest(): 1}
    )
    again = client.post("/actuals", json={"actuals": [report]}).json()
    assert (again["accepted"], again["repeated"], again["stream_length"]) == (0, 1, 1)


def test_the_record_of_stored_reports_is_trimmed_with_the_stream(
    make_client: AppFactory, redis_client: redis.Redis
) -> None:
    client = make_client(actuals_maxlen=40)
    for step in range(10):
        reports = [actual_report(step, p, i) for p in range(8) for i in range(4)]
        assert client.post("/actuals", json={"actuals": reports}).json()["accepted"] == 32
    seen, held = redis_client.zcard(keys.actuals_seen()), redis_client.xlen("rs:actuals")
    assert seen == held < 10 * 32  # one digest per report the stream holds, not per report ever sent
    again = client.post("/actuals", json={"actuals": reports}).json()  # the newest are still known
    assert (again["accepted"], again["repeated"]) == (0, 32)


def test_a_worker_measured_slower_than_its_profile_is_planned_slower(client: TestClient) -> None:
    client.post("/schedule", json=batch_body(workers=2))  # the service learns the workers' profiles
    slow = [actual_report(0, p, 0, worker="w0", slowdown=2.0) for p in range(6)]
    learned = client.post("/actuals", json={"actuals": slow}).json()["time_scales"]
    assert abs(learned["w0"] - 2.0) < 1e-6
    answer = client.post("/schedule", json=batch_body(workers=2)).json()
    assert abs(answer["time_scales"]["w0"] - 2.0) < 1e-6
    assert answer["time_scale_sources"]["w0"] == "learned"


def test_a_batch_teaches_its_mean_speed_not_that_of_its_last_reports(client: TestClient) -> None:
    """A step's reports end with its tail: folded one by one, the last few decided the speed."""
    client.post("/schedule", json=batch_body(workers=2))
    on_time = [actual_report(0, p, 0, worker="w0") for p in range(6)]
    late_tail = [actual_report(0, p, 1, worker="w0", slowdown=4.0) for p in range(2)]
    first = client.post("/actuals", json={"actuals": on_time + late_tail}).json()["time_scales"]["w0"]
    weights = [_modelled(r) for r in on_time + late_tail]
    assert abs(first - (sum(weights[:6]) + 4.0 * sum(weights[6:])) / sum(weights)) < 1e-6  # time-weighted
    next_step = [actual_report(1, p, 0, worker="w0") for p in range(6)]  # new reports, on time
    second = client.post("/actuals", json={"actuals": next_step}).json()["time_scales"]["w0"]
    assert abs(second - math.exp(0.8 * math.log(first))) < 1e-6  # one step of the EWMA (alpha 0.2)


def test_short_reports_do_not_outweigh_the_long_ones_that_measure_decode_speed(client: TestClient) -> None:
    """Fixed costs (HTTP, a first wave of prefills) weigh most on short items: counted one per item,
    a heavy-tailed batch's many short reports made a 0.25x engine look 0.44x."""
    client.post("/schedule", json=batch_body(workers=2))
    short = [actual_report(0, 0, i, worker="w0", slowdown=2.0) for i in range(6)]  # ~200 tokens each
    long = [actual_report(0, 12, 0, worker="w0")]  # ~2,000 tokens, on time
    learned = client.post("/actuals", json={"actuals": short + long}).json()["time_scales"]["w0"]
    weights = [_modelled(r) for r in short + long]
    assert abs(learned - (2.0 * sum(weights[:6]) + sum(weights[6:])) / sum(weights)) < 1e-6
    assert learned < 1.5  # where one vote per report said (6 * 2 + 1) / 7 = 1.86


def _modelled(report: dict[str, Any]) -> float:
    h100 = Worker("w0", device_profile("H100"), max_num_seqs=64)
    return modelled_seconds(h100, model_preset("7b"), ActualReport.model_validate(report))


def test_a_stated_speed_wins_over_the_learned_one(client: TestClient) -> None:
    client.post("/schedule", json=batch_body(workers=2))
    client.post("/actuals", json={"actuals": [actual_report(0, 1, 0, slowdown=3.0)]})
    body = batch_body(workers=2)
    body["inventory"]["workers"][0]["time_scale"] = 1.25
    answer = client.post("/schedule", json=body).json()
    assert answer["time_scales"]["w0"] == 1.25
    assert answer["time_scale_sources"]["w0"] == "request"


def test_history_reported_by_workers_drives_the_next_prediction(client: TestClient) -> None:
    client.post("/actuals", json={"actuals": actual_history(steps=1)})
    answer = client.post("/schedule", json=batch_body(step=1, publish=False)).json()
    assert answer["prediction_sources"] == {"prompt_history_mean": 32}
    by_prompt = {
        i["prompt_id"]: i["predicted_tokens"] for queue in answer["assignments"].values() for i in queue
    }
    assert by_prompt["p7"] > by_prompt["p0"]  # longer in history, longer predicted


def test_a_report_without_concurrency_teaches_no_speed(client: TestClient) -> None:
    client.post("/schedule", json=batch_body(workers=2))
    report = actual_report(0, 1, 0, slowdown=5.0)
    del report["concurrency"]
    assert client.post("/actuals", json={"actuals": [report]}).json()["time_scales"] == {}
    assert client.post("/schedule", json=batch_body(workers=2)).json()["time_scales"]["w0"] == 1.0


def test_a_worker_not_measured_yet_is_planned_like_its_measured_peers(client: TestClient) -> None:
    """A fleet faster than its datasheet, measured one worker at a time, must not flood the first
    measured worker and starve its identical peers, which would then never be measured."""
    fleet = batch_body(workers=3)
    for spec in fleet["inventory"]["workers"]:
        spec["device"] = "H100"  # three identical workers
    client.post("/schedule", json=fleet)
    fast = [actual_report(0, p, 0, worker="w0", slowdown=0.05) for p in range(6)]
    client.post("/actuals", json={"actuals": fast})

    answer = client.post("/schedule", json=fleet).json()

    assert answer["time_scale_sources"] == {"w0": "learned", "w1": "learned_peers", "w2": "learned_peers"}
    assert answer["time_scales"]["w1"] == answer["time_scales"]["w2"] == answer["time_scales"]["w0"]
    assert all(answer["assignments"][w] for w in ("w0", "w1", "w2"))  # each one is given work


def test_peers_lend_their_scale_within_one_profile_before_the_fleet_does(client: TestClient) -> None:
    fleet = batch_body(workers=4)  # w0, w2 H100s; w1, w3 Ascend 910Bs
    client.post("/schedule", json=fleet)
    client.post(
        "/actuals", json={"actuals": [actual_report(0, p, 0, worker="w0", slowdown=0.05) for p in range(6)]}
    )
    client.post(
        "/actuals", json={"actuals": [actual_report(0, p, 1, worker="w1", slowdown=0.5) for p in range(6)]}
    )
    answer = client.post("/schedule", json=fleet).json()
    sources = {"w0": "learned", "w1": "learned", "w2": "learned_peers", "w3": "learned_peers"}
    assert answer["time_scale_sources"] == sources
    assert answer["time_scales"]["w2"] == answer["time_scales"]["w0"]
    assert answer["time_scales"]["w3"] == answer["time_scales"]["w1"]


def test_a_kind_none_of_whose_workers_is_measured_is_planned_at_the_fleets_speed(client: TestClient) -> None:
    """H100s measured 20x faster than their datasheet (engine-sim at ``--time-scale 0.01``) left the
    Ascends beside them at their profile's 1.0: 20x slower than they were, given nothing, and so
    never measured. Until a kind is measured, the fleet's mean keeps the model's relative speeds."""
    fleet = batch_body(prompts=64, n=8, workers=4)  # 512 trajectories: work for every worker
    client.post("/schedule", json=fleet)
    fast = [
        actual_report(0, p, s, worker=w, slowdown=0.05)
        for w in ("w0", "w2")
        for p in range(4)
        for s in (0, 1)
    ]
    client.post("/actuals", json={"actuals": fast})

    answer = client.post("/schedule", json=fleet).json()

    assert answer["time_scale_sources"]["w1"] == answer["time_scale_sources"]["w3"] == "learned_fleet"
    assert answer["time_scales"]["w1"] == pytest.approx(answer["time_scales"]["w0"])
    assert all(answer["assignments"][w] for w in ("w1", "w3"))  # the Ascends are given work again

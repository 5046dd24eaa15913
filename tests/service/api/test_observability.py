"""Prometheus metrics and structured JSON logs carrying the schedule id."""

from __future__ import annotations

import json
import logging
import re
import shutil
import time
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient

from service.delivery import Delivery
from service.logs import JsonFormatter
from service.metrics import Metrics
from service.redis_conn import describe
from tests.service.api_helpers import AppFactory, actual_history, actual_report, batch_body
from tests.service.metrics_docs import DOCS, documented_metrics, exported_metrics


def test_metrics_expose_requests_latency_plan_quality_and_queue_depths(client: TestClient) -> None:
    sid = client.post("/schedule", json=batch_body()).json()["schedule_id"]
    client.post("/schedule", json={"bad": 1})
    text = client.get("/metrics").text
    assert 'rollout_http_requests_total{method="POST",route="/schedule",status="200"} 1.0' in text
    assert 'rollout_http_requests_total{method="POST",route="/schedule",status="422"} 1.0' in text
    assert 'rollout_http_request_seconds_count{route="/schedule"} 2.0' in text
    assert 'rollout_plan_quality_ratio_count{policy="lpt"} 1.0' in text
    assert 'rollout_schedule_stage_seconds_count{stage="plan"} 1.0' in text
    assert 'rollout_schedule_stage_seconds_count{stage="queue"} 1.0' in text  # the wait for a plan slot
    assert client.get(f"/schedule/{sid}").json()["queued"] == 32  # one step's own, by id
    assert 'rollout_queue_depth{state="queued"} 32.0' in text
    assert "rollout_queue_schedules 1.0" in text


def test_two_apps_in_one_process_keep_separate_metrics(client: TestClient, secured: TestClient) -> None:
    client.post("/schedule", json=batch_body())
    assert "rollout_plan_quality_ratio_count" not in secured.get("/metrics").text.split("policy")[0]
    assert 'route="/schedule"' not in secured.get("/metrics").text


def test_log_lines_are_json_with_the_schedule_id(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="service"):
        sid = client.post("/schedule", json=batch_body()).json()["schedule_id"]
    lines = [json.loads(JsonFormatter().format(r)) for r in caplog.records if r.name == "service.pipeline"]
    scheduled = [line for line in lines if line["message"] == "scheduled"]
    assert scheduled
    assert scheduled[0]["schedule_id"] == sid
    assert scheduled[0]["trajectories"] == 32
    assert scheduled[0]["policy"] == "lpt"


def test_the_scheduled_line_carries_each_stage_of_the_batch_in_milliseconds(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="service"):
        timings = client.post("/schedule", json=batch_body()).json()["timings"]
    lines = [json.loads(JsonFormatter().format(r)) for r in caplog.records if r.name == "service.pipeline"]
    scheduled = next(line for line in lines if line["message"] == "scheduled")
    assert {key: scheduled[key] for key in timings} == {key: round(ms, 1) for key, ms in timings.items()}


def test_a_batch_of_actuals_logs_one_line_with_its_schedule_id_counts_and_milliseconds(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    reports = [{**actual_report(0, p, 0), "schedule_id": "step-0"} for p in range(3)]
    with caplog.at_level(logging.INFO, logger="service"):
        client.post("/actuals", json={"actuals": reports})
        client.post("/actuals", json={"actuals": reports})  # a retry: stored already
    lines = [json.loads(JsonFormatter().format(r)) for r in caplog.records]
    stored = [line for line in lines if line["message"] == "actuals stored"]
    assert [(line["schedule_id"], line["accepted"], line["repeated"]) for line in stored] == [
        ("step-0", 3, 0),
        ("step-0", 0, 3),
    ]
    assert all(line["ms"] >= 0 for line in stored)
    access = [line for line in lines if line["logger"] == "service.access"]
    assert [line.get("schedule_id") for line in access] == ["step-0", "step-0"]


def test_actuals_of_several_schedules_name_them_all_on_their_line(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    reports = [{**actual_report(s, 0, 0), "schedule_id": f"step-{s}"} for s in range(2)]
    reports.append(actual_report(2, 0, 0))  # no schedule named
    with caplog.at_level(logging.INFO, logger="service"):
        client.post("/actuals", json={"actuals": reports})
    stored = next(r for r in caplog.records if r.getMessage() == "actuals stored")
    line = json.loads(JsonFormatter().format(stored))
    assert "schedule_id" not in line
    assert line["schedule_ids"] == ["step-0", "step-1"]


def test_an_automatic_retrain_logs_its_result_under_the_step_that_started_it(
    make_client: AppFactory, caplog: pytest.LogCaptureFixture
) -> None:
    client = make_client(retrain_every_steps=1)
    client.post("/schedule", json=batch_body(step=0))
    client.post("/actuals", json={"actuals": actual_history(steps=2)})  # steps 0 and 1, both done
    with caplog.at_level(logging.INFO, logger="service"):
        sid = client.post("/schedule", json=batch_body(step=2)).json()["schedule_id"]
        retrainer = client.app.state.context.retrainer  # type: ignore[attr-defined]
        retrainer.background.join(60)
    done = [json.loads(JsonFormatter().format(r)) for r in caplog.records if r.getMessage() == "retrain done"]
    assert [(line["schedule_id"], line["trigger"], line["model_version"]) for line in done] == [
        (sid, "step", "v1")
    ]
    assert done[0]["history_rows"] == 64
    assert done[0]["seconds"] >= 0


def test_an_on_demand_retrain_logs_its_result(client: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    client.post("/actuals", json={"actuals": actual_history(steps=2)})
    with caplog.at_level(logging.INFO, logger="service"):
        seconds = client.post("/models/retrain").json()["seconds"]
    done = [json.loads(JsonFormatter().format(r)) for r in caplog.records if r.getMessage() == "retrain done"]
    assert [(line["trigger"], line["model_version"], line["seconds"]) for line in done] == [
        ("request", "v1", round(seconds, 3))
    ]


def test_request_labels_stay_bounded_and_name_the_route_even_when_refused_before_routing(
    make_client: AppFactory,
) -> None:
    client = make_client(max_body_bytes=1_000)
    for verb in ("FOO", "BAR"):
        client.request(verb, "/healthz")
    client.post("/schedule", content=b"x" * 2_000, headers={"content-type": "application/json"})
    assert client.get("/openapi.json").status_code == 200
    text = client.get("/metrics").text
    assert 'method="FOO"' not in text
    assert 'rollout_http_requests_total{method="other",route="/healthz",status="405"} 2.0' in text
    assert 'rollout_http_requests_total{method="POST",route="/schedule",status="413"} 1.0' in text
    assert 'rollout_http_requests_total{method="GET",route="/openapi.json",status="200"} 1.0' in text


def test_the_access_line_of_a_schedule_request_carries_its_schedule_id(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="service"):
        sid = client.post("/schedule", json=batch_body()).json()["schedule_id"]
        client.get(f"/schedule/{sid}")
    access = [json.loads(JsonFormatter().format(r)) for r in caplog.records if r.name == "service.access"]
    assert [(line["route"], line.get("schedule_id")) for line in access] == [
        ("/schedule", sid),
        ("/schedule/{schedule_id}", sid),
    ]


def test_a_failed_on_demand_retrain_is_counted_as_an_error(make_client: AppFactory, tmp_path: Path) -> None:
    client = make_client(model_dir=str(tmp_path / "models"))
    assert client.post("/actuals", json={"actuals": actual_history(steps=2)}).status_code == 200
    shutil.rmtree(tmp_path / "models", ignore_errors=True)
    (tmp_path / "models").write_text("not a folder")  # replaced under the running service
    assert client.post("/models/retrain").status_code == 503  # the store named, not a bare 500
    text = client.get("/metrics").text
    assert 'rollout_retrains_total{outcome="error"} 1.0' in text
    assert 'rollout_http_requests_total{method="POST",route="/models/retrain",status="503"} 1.0' in text


def test_queue_depths_skip_a_schedule_that_expired_and_keep_the_others(
    client: TestClient, redis_client: redis.Redis
) -> None:
    client.post("/schedule", json=batch_body())
    redis_client.zadd("rs:active", {"expired-meanwhile": 1})
    text = client.get("/metrics").text
    assert 'rollout_queue_depth{state="queued"} 32.0' in text
    assert "rollout_queue_schedules 1.0" in text  # the expired one is not counted


def test_the_queue_depths_keep_the_same_series_however_many_schedules_come_and_go(
    client: TestClient, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each step is a new schedule: a ``schedule_id`` label minted four series a step (Prometheus
    keeps every series it ever saw in its head and index: thousands a day), though each left the
    exposition when its schedule ended. Summed by state, the series are the same four for good."""
    monkeypatch.setattr("service.metrics.DEPTH_CACHE_S", 0.0)  # every scrape reads Redis
    delivery = Delivery(redis_client)

    def series() -> set[str]:
        lines = client.get("/metrics").text.splitlines()
        return {line.rsplit(" ", 1)[0] for line in lines if line.startswith("rollout_queue_")}

    idle = series()
    seen = set(idle)
    for _ in range(20):
        sid = client.post("/schedule", json=batch_body()).json()["schedule_id"]
        seen |= series()
        delivery.cancel(sid)  # the step ends (as its last result would end it)
    states = {f'rollout_queue_depth{{state="{state}"}}' for state in ("queued", "running", "done", "failed")}
    assert seen == idle == {*states, "rollout_queue_schedules"}
    assert "rollout_queue_schedules 0.0" in client.get("/metrics").text


def test_a_password_in_the_url_query_is_masked_in_logs() -> None:
    assert "s3cret" not in describe("redis://127.0.0.1:6379/0?password=s3cret&ssl_cert_reqs=none")
    assert describe("redis://u:s3cret@h:6379/0") == "redis://u:***@h:6379/0"


@pytest.mark.parametrize(
    "url", ["redis://u:12?s3cr@h:6379/0", "redis://u:12/s3cr@h/0", "redis://u:1#s3cr@h/0"]
)
def test_a_password_with_an_unescaped_delimiter_is_masked_whole(url: str) -> None:
    # '?', '/' or '#' inside a password split the URL there: its tail read as a query or a path
    assert "s3cr" not in describe(url)
    assert describe(url).endswith("@h:6379/0") or describe(url).endswith("@h/0")


def test_a_flood_of_scrapes_reads_the_queue_depths_from_redis_at_most_once_per_window() -> None:
    """/metrics needs no token: a scrape flood must not become a flood of Redis reads."""
    reads: list[int] = []

    def depths() -> dict[tuple[str, str], int]:
        reads.append(1)
        return {("s", "queued"): 3}

    metrics = Metrics()
    metrics.watch_queues(depths)
    for _ in range(50):
        assert 'rollout_queue_depth{state="queued"} 3.0' in metrics.render().decode()
    assert len(reads) == 1


def test_the_stage_histogram_tells_a_millisecond_stage_from_a_few_millisecond_one() -> None:
    """validate and baseline take about 1 ms and predict about 4 ms at 1,024 x 16 (docs/benchmarks.md):
    a first bucket above both would put every one of them in it, and their quantiles would say nothing."""
    metrics = Metrics()
    metrics.stage.labels("validate").observe(0.0012)
    metrics.stage.labels("predict").observe(0.0041)
    buckets = [
        line
        for line in metrics.render().decode().splitlines()
        if line.startswith("rollout_schedule_stage_seconds_bucket")
    ]
    validate = [line.rsplit(" ", 1)[1] for line in buckets if 'stage="validate"' in line]
    predict = [line.rsplit(" ", 1)[1] for line in buckets if 'stage="predict"' in line]
    assert validate != predict


def _scraped(client: TestClient, line: str, within_s: float = 5.0) -> str:
    """The /metrics text once it holds ``line`` (the reaper and hot reload run on their own clocks)."""
    deadline = time.monotonic() + within_s
    text = client.get("/metrics").text
    while line not in text and time.monotonic() < deadline:
        time.sleep(0.1)
        text = client.get("/metrics").text
    return text


def test_leases_a_worker_stopped_heartbeating_are_counted_by_what_the_reaper_did_with_them(
    make_client: AppFactory, redis_client: redis.Redis
) -> None:
    client = make_client(lease_ttl_ms=100, max_attempts=2)
    text = client.get("/metrics").text
    assert 'rollout_reaped_leases_total{outcome="requeued"} 0.0' in text  # there before any reap
    assert 'rollout_reaped_leases_total{outcome="dead_lettered"} 0.0' in text
    sid = client.post("/schedule", json=batch_body()).json()["schedule_id"]
    delivery = Delivery(redis_client)
    assert len(delivery.claim(sid, "w0", 3)) == 3  # then the worker dies: no heartbeat

    text = _scraped(client, 'rollout_reaped_leases_total{outcome="requeued"} 3.0')
    assert 'rollout_reaped_leases_total{outcome="requeued"} 3.0' in text
    assert 'rollout_reaped_leases_total{outcome="dead_lettered"} 0.0' in text

    assert len(delivery.claim(sid, "w0", 3)) == 3  # the same three again: their last attempt
    text = _scraped(client, 'rollout_reaped_leases_total{outcome="dead_lettered"} 3.0')
    assert 'rollout_reaped_leases_total{outcome="dead_lettered"} 3.0' in text
    assert 'rollout_reaped_leases_total{outcome="requeued"} 3.0' in text
    assert client.get(f"/schedule/{sid}").json()["failed"] == 3


def test_the_model_info_names_the_one_version_serving_and_follows_a_retrain_by_another_replica(
    make_client: AppFactory,
) -> None:
    trainer, follower = make_client(), make_client()  # two replicas on one store and one Redis
    assert _model_info(follower.get("/metrics").text) == ['rollout_model_info{version="fallback"} 1.0']

    assert trainer.post("/actuals", json={"actuals": actual_history(steps=2)}).status_code == 200
    assert trainer.post("/models/retrain").status_code == 200
    assert 'rollout_model_info{version="v1"} 1.0' in trainer.get("/metrics").text

    text = _scraped(follower, 'rollout_model_info{version="v1"} 1.0')  # hot reload, within a second
    assert _model_info(text) == ['rollout_model_info{version="v1"} 1.0']


def _model_info(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("rollout_model_info")]


def test_every_metric_the_service_exports_is_documented_with_its_labels_and_no_other(
    client: TestClient,
) -> None:
    client.post("/schedule", json=batch_body())
    client.post("/actuals", json={"actuals": actual_history(steps=2)})
    client.post("/models/retrain")
    section = (DOCS / "api.md").read_text().split("## Metrics", 1)[1].split("\n## ", 1)[0]
    assert exported_metrics(client.get("/metrics").text) == documented_metrics(section)


def test_metric_names_follow_prometheus_conventions(client: TestClient) -> None:
    """Counters end in ``_total`` and nothing else does; times are in seconds, not milliseconds."""
    client.post("/schedule", json=batch_body())
    types = dict(
        line.split()[2:4] for line in client.get("/metrics").text.splitlines() if line.startswith("# TYPE")
    )
    ours = {name: kind for name, kind in types.items() if not name.endswith("_created")}
    assert all((kind == "counter") == name.endswith("_total") for name, kind in ours.items())
    assert not [name for name in ours if re.search(r"_(ms|milliseconds|minutes|hours)(_|$)", name)]


def test_the_speedup_of_the_last_plan_has_no_series_until_this_replica_has_planned(
    client: TestClient,
) -> None:
    """A replica that has planned nothing (a fresh pod, or one the trainers' requests did not reach)
    has no last plan: a 0 there read as a plan 0x as fast as round robin."""
    assert not _speedup(client.get("/metrics").text)
    planned = client.post("/schedule", json=batch_body()).json()
    assert _speedup(client.get("/metrics").text) == [
        f"rollout_plan_speedup_vs_round_robin {float(planned['speedup_vs_round_robin'])!r}"
    ]


def _speedup(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("rollout_plan_speedup_vs_round_robin")]


def test_counters_of_a_fixed_label_set_read_zero_before_their_first_count(client: TestClient) -> None:
    """A series born at its first count reads 1 at its first sample, so ``increase()`` sees no rise
    and an alert on a replica's first failed retrain never fired."""
    text = client.get("/metrics").text
    for outcome in ("ok", "busy", "insufficient_data", "error", "stopped"):
        assert f'rollout_retrains_total{{outcome="{outcome}"}} 0.0' in text
    for published in ("true", "false"):
        assert f'rollout_scheduled_trajectories_total{{published="{published}"}} 0.0' in text

"""Prometheus metrics and structured JSON logs carrying the schedule id."""

from __future__ import annotations

import json
import logging

import pytest
from fastapi.testclient import TestClient

from service.logs import JsonFormatter
from tests.service.api.conftest import batch_body


def test_metrics_expose_requests_latency_plan_quality_and_queue_depths(client: TestClient) -> None:
    sid = client.post("/schedule", json=batch_body()).json()["schedule_id"]
    client.post("/schedule", json={"bad": 1})
    text = client.get("/metrics").text
    assert 'rollout_http_requests_total{method="POST",route="/schedule",status="200"} 1.0' in text
    assert 'rollout_http_requests_total{method="POST",route="/schedule",status="422"} 1.0' in text
    assert 'rollout_http_request_seconds_count{route="/schedule"} 2.0' in text
    assert 'rollout_plan_quality_ratio_count{policy="lpt"} 1.0' in text
    assert 'rollout_schedule_stage_seconds_count{stage="plan"} 1.0' in text
    assert f'rollout_queue_depth{{schedule_id="{sid}",state="queued"}} 32.0' in text


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

"""Fleet-wide speed state that does not read (another release's format, a hand edit) never fails a request.

``rs:workers`` and ``rs:speed`` are shared by every replica and outlive a release: a rollback meets
profiles a newer release wrote, and an operator may edit them. Like an unreadable actuals entry, such
an entry is skipped with a warning. In ``POST /actuals`` it matters twice over: the speed update runs
after the reports are stored, so failing there answered an error for a batch that was in fact stored.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from tests.service.api_helpers import actual_report, batch_body

FOREIGN_PROFILES = {
    "not JSON": "garbage",
    "a JSON list": "[1]",
    "a device missing its fields": json.dumps(
        {"device": {}, "num_gpus": 1, "max_num_seqs": 64, "kv_capacity_tokens": None, "model": "7b"}
    ),
    "an unknown model": "newer",
    "a device field this release lacks": "newer-device",
}


def _foreign(kind: str, published: str) -> str:
    """A profile of ``kind``; the last two are edits of the one this release ``published``."""
    raw = FOREIGN_PROFILES[kind]
    profile: dict[str, Any] = json.loads(published)
    if raw == "newer":
        return json.dumps({**profile, "model": "70b"})
    if raw == "newer-device":
        return json.dumps({**profile, "device": {**profile["device"], "fp8_tflops": 1979.0}})
    return raw


@pytest.mark.parametrize("kind", sorted(FOREIGN_PROFILES))
def test_an_unreadable_worker_profile_stores_the_reports_and_answers_200(
    kind: str, client: TestClient, redis_client: redis.Redis
) -> None:
    assert client.post("/schedule", json=batch_body()).status_code == 200
    published = str(redis_client.hget("rs:workers", "w0"))
    redis_client.hset("rs:workers", "w0", _foreign(kind, published))
    response = client.post("/actuals", json={"actuals": [actual_report(1, 0, 0)]})
    assert response.status_code == 200, response.text
    assert (response.json()["accepted"], response.json()["time_scales"]) == (1, {})  # no model: no speed
    assert redis_client.hget("rs:speed", "w0") is None


UNREADABLE_SPEEDS: list[str | bytes] = [
    "garbage",
    "{}",
    "null",
    '{"log_scale": "x", "samples": 1}',
    '{"log_scale": 1e6, "samples": 1}',  # past what clamped samples reach: exp() overflowed
    b'{"log_scale": 0.1, "samples": 1\xff\xfe}',  # not UTF-8: a strict client's reply failed (500)
]


@pytest.mark.parametrize("stored", UNREADABLE_SPEEDS)
def test_an_unreadable_learned_speed_is_ignored_by_plans_and_replaced_by_the_next_batch(
    stored: str | bytes, client: TestClient, redis_client: redis.Redis
) -> None:
    assert client.post("/schedule", json=batch_body()).status_code == 200
    redis_client.hset("rs:speed", "w0", stored)
    plan = client.post("/schedule", json=batch_body(publish=False))
    assert plan.status_code == 200, plan.text
    assert plan.json()["time_scale_sources"]["w0"] == "profile"
    response = client.post("/actuals", json={"actuals": [actual_report(1, 0, 0)]})
    assert response.status_code == 200, response.text
    assert json.loads(str(redis_client.hget("rs:speed", "w0")))["samples"] == 1  # started afresh

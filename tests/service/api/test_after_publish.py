"""What follows a publish (remembering worker profiles, counting the step towards a retrain) is
bookkeeping: once the step is out, a Redis error there must not turn its answer into an error. A
trainer that heard 503 for a published step would send it again, and without a ``schedule_id`` the
retry publishes the same work a second time."""

from __future__ import annotations

import logging

import pytest
import redis
from fastapi.testclient import TestClient

from service.delivery import keys
from tests.service.api_helpers import AppFactory, batch_body


def test_a_published_step_is_answered_200_when_remembering_worker_profiles_fails(
    client: TestClient, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    redis_client.set(keys.worker_profiles(keys.DEFAULT_PREFIX), "not a hash")  # every HSET on it: WRONGTYPE
    with caplog.at_level(logging.WARNING):
        response = client.post("/schedule", json=batch_body(prompts=4, n=2, workers=2))
    assert response.status_code == 200, response.text
    progress = client.get(f"/schedule/{response.json()['schedule_id']}").json()
    assert progress["total"] == progress["queued"] == 8  # the step is out, once
    assert any("worker profiles" in r.getMessage() and "WRONGTYPE" in r.getMessage() for r in caplog.records)


def test_a_published_step_is_answered_200_when_counting_it_towards_a_retrain_fails(
    make_client: AppFactory, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    client = make_client(retrain_every_steps=2)
    redis_client.hset(keys.retrain_step(keys.DEFAULT_PREFIX), "not", "a string")  # GET on it: WRONGTYPE
    with caplog.at_level(logging.WARNING):
        response = client.post("/schedule", json=batch_body(prompts=4, n=2, workers=2, step=3))
    assert response.status_code == 200, response.text
    assert client.get(f"/schedule/{response.json()['schedule_id']}").json()["total"] == 8
    assert any("retrain" in r.getMessage() and "WRONGTYPE" in r.getMessage() for r in caplog.records)

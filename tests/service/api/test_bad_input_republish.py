"""A request under a schedule id already published (a lost race, a retry with a bad field): refused,
announcing nothing new and changing nothing."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis
from fastapi.testclient import TestClient

from service import pipeline
from tests.service.api.badinput import Body, redis_snapshot, set_at
from tests.service.api.conftest import batch_body


def test_a_publish_that_loses_a_race_for_its_schedule_id_changes_nothing(
    client: TestClient, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = batch_body(schedule_id="race")
    assert client.post("/schedule", json=first).status_code == 200
    before = redis_snapshot(redis_client), redis_client.hgetall("rs:workers")
    # The loser of two concurrent requests passed the early check before the winner published.
    monkeypatch.setattr(pipeline, "refuse_republish", lambda body, schedule_id, ctx: None)
    second = batch_body(schedule_id="race")
    second["inventory"]["workers"][0]["device"] = "A100-80GB"
    response = client.post("/schedule", json=second)
    assert response.status_code == 409
    assert (response.json()["field"], response.json()["value"]) == ("schedule_id", "race")
    assert (redis_snapshot(redis_client), redis_client.hgetall("rs:workers")) == before


def test_of_two_identical_requests_racing_for_one_schedule_id_only_one_is_told_it_published(
    client: TestClient, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = batch_body(schedule_id="twins")
    assert client.post("/schedule", json=body).status_code == 200
    before = redis_snapshot(redis_client)
    monkeypatch.setattr(pipeline, "refuse_republish", lambda body, schedule_id, ctx: None)  # passed it first
    response = client.post("/schedule", json=body)
    assert response.status_code == 409
    assert response.json()["field"] == "schedule_id"
    after = redis_snapshot(redis_client)
    # Like every 409 for a published id, the loser announces the step again (so its 409 means the
    # step is out, even if the winner's announce was lost): only the inboxes' expiry may move, later.
    inboxes = {key for key in before if key.startswith("rs:inbox:")}
    assert inboxes
    assert {k: v for k, v in after.items() if k not in inboxes} == {
        k: v for k, v in before.items() if k not in inboxes
    }
    for key in inboxes:
        assert after[key][0] == before[key][0]
        assert after[key][1] >= before[key][1]


def _pinned_body() -> Body:
    """A valid body whose first prompt is pinned to worker ``w1``."""
    body = batch_body(schedule_id="kept")
    body["batch"]["items"][0]["pinned_worker"] = "w1"
    return body


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (set_at("inventory.workers.0.device", "TPUv9"), "inventory.workers[0].device"),
        (set_at("policy", "fastest"), "policy"),
        (set_at("inventory.workers.1.worker_id", "w0"), "inventory.workers[1].worker_id"),
        (set_at("inventory.workers.1.worker_id", "w7"), "batch.items[0].pinned_worker"),
        (set_at("inventory.workers.1.drain", True), "batch.items[0].pinned_worker"),
        (set_at("inventory.workers.1.kv_capacity_tokens", 1000), "batch.items[0].max_new_tokens"),
    ],
    ids=[
        "unknown device",
        "unknown policy",
        "duplicate worker_id",
        "a pin to a worker the inventory lacks",
        "a pin to a drained worker",
        "a cap the pinned worker's cache cannot hold",
    ],
)
def test_a_retry_under_a_published_id_with_a_bad_field_is_a_422_naming_it_and_announces_nothing(
    edit: Callable[[Body], None], field: str, client: TestClient, redis_client: redis.Redis
) -> None:
    assert client.post("/schedule", json=_pinned_body()).status_code == 200
    inboxes = sorted(redis_client.scan_iter("rs:inbox:*"))
    for key in inboxes:  # a retention clearly below the one an announce sets again
        redis_client.pexpire(key, 1_000_000)
    before = redis_snapshot(redis_client)
    retry = _pinned_body()  # the same work: only planning knobs differ
    edit(retry)
    response = client.post("/schedule", json=retry)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field
    assert redis_snapshot(redis_client) == before
    assert inboxes
    assert all(0 < redis_client.pttl(key) <= 1_000_000 for key in inboxes)

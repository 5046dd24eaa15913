"""A worker drained in POST /schedule (``drain: true``) takes nothing of that schedule: no queue of
its own, and none of its peers' work by stealing, from the shared queue or as a failed item's retry,
whatever its sidecar does (one drains a worker to take it down or because it misbehaves, and its
sidecar usually still runs). The simulator never lets an excluded worker take work; neither does
the delivery protocol. What it holds of an older schedule it keeps finishing: drain is not cancel."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from service.delivery import Delivery
from tests.service.api_helpers import batch_body


def _drained_body(policy: str) -> dict[str, Any]:
    body = batch_body(workers=3, policy=policy, schedule_id=f"step-{policy}")
    body["inventory"]["workers"][0]["drain"] = True  # w0
    return body


@pytest.mark.parametrize("policy", ["lpt", "least_loaded"])  # own queues; the shared queue
def test_a_drained_worker_is_not_announced_the_schedule_and_takes_nothing_of_it(
    client: TestClient, redis_client: redis.Redis, policy: str
) -> None:
    response = client.post("/schedule", json=_drained_body(policy))
    assert response.status_code == 200, response.text
    sid = response.json()["schedule_id"]
    delivery = Delivery(redis_client)
    assert sid not in delivery.schedules_for("w0")
    assert sid in delivery.schedules_for("w1")
    assert delivery.claim(sid, "w0", 64) == []
    assert delivery.steal(sid, "w0", 64) == []
    assert delivery.progress(sid).queued == 32  # all of it still waits for w1 and w2


def test_a_pin_to_a_drained_worker_is_refused_in_the_words_of_the_request(client: TestClient) -> None:
    """The core calls a drained worker excluded, a word no request uses: the 422 says drain."""
    body = _drained_body("lpt")
    body["batch"]["items"][1]["pinned_worker"] = "w0"
    response = client.post("/schedule", json=body)
    assert response.status_code == 422, response.text
    problem = response.json()
    assert (problem["field"], problem["value"]) == ("batch.items[1].pinned_worker", "w0")
    assert "drain: true" in problem["detail"]
    assert client.get("/schedule/step-lpt").status_code == 404  # refused whole: nothing published

"""GET /schedule/{id} tells an operator whether a step is late: time since its publish, on the lease
clock, against the makespan and per-worker finishes its plan predicted. A step an older release
published (no predicted times stored) answers the same counts with those fields null."""

from __future__ import annotations

import time

import pytest
import redis
from fastapi.testclient import TestClient

from service.delivery.keys import PLANNED_FINISH, PREDICTED_MAKESPAN, schedule_keys
from tests.service.api_helpers import batch_body


def _server_ms(redis_client: redis.Redis) -> int:
    seconds, micros = redis_client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def test_progress_carries_the_plans_makespan_and_each_workers_planned_finish(client: TestClient) -> None:
    plan = client.post("/schedule", json=batch_body(workers=3)).json()
    progress = client.get(f"/schedule/{plan['schedule_id']}").json()
    assert progress["predicted_makespan_s"] == pytest.approx(plan["predicted_makespan_s"])
    finishes = {w: counts["planned_finish_s"] for w, counts in progress["workers"].items()}
    assert set(finishes) == {"w0", "w1", "w2"}
    busy = {w for w, items in plan["assignments"].items() if items}
    assert all(finishes[w] > 0 for w in busy)
    assert max(finishes.values()) == pytest.approx(plan["predicted_makespan_s"])


def test_elapsed_time_is_counted_from_the_publish_on_the_redis_clock(
    client: TestClient, redis_client: redis.Redis
) -> None:
    before = _server_ms(redis_client)
    sid = client.post("/schedule", json=batch_body()).json()["schedule_id"]
    after = _server_ms(redis_client)
    first = client.get(f"/schedule/{sid}").json()
    assert before <= first["published_at_ms"] <= after
    time.sleep(0.3)
    read_from = _server_ms(redis_client)
    second = client.get(f"/schedule/{sid}").json()
    read_to = _server_ms(redis_client)
    assert second["published_at_ms"] == first["published_at_ms"]
    assert (read_from - first["published_at_ms"]) / 1000 <= second["elapsed_s"]
    assert second["elapsed_s"] <= (read_to - first["published_at_ms"]) / 1000
    assert second["elapsed_s"] >= first["elapsed_s"] + 0.3


def test_a_step_published_by_an_older_release_answers_null_predictions_not_an_error(
    client: TestClient, redis_client: redis.Redis
) -> None:
    sid = client.post("/schedule", json=batch_body()).json()["schedule_id"]
    redis_client.hdel(schedule_keys(sid).meta, PREDICTED_MAKESPAN, PLANNED_FINISH)  # as it stored them
    response = client.get(f"/schedule/{sid}")
    assert response.status_code == 200, response.text
    progress = response.json()
    assert (progress["total"], progress["queued"]) == (32, 32)
    assert progress["predicted_makespan_s"] is None
    assert {w["planned_finish_s"] for w in progress["workers"].values()} == {None}
    assert progress["published_at_ms"] > 0  # every release stored the publish time
    assert progress["elapsed_s"] >= 0


def test_predicted_times_another_tool_wrote_unreadably_are_null_not_a_500(
    client: TestClient, redis_client: redis.Redis
) -> None:
    sid = client.post("/schedule", json=batch_body()).json()["schedule_id"]
    meta = schedule_keys(sid).meta
    redis_client.hset(meta, mapping={PREDICTED_MAKESPAN: "soon", PLANNED_FINISH: "[not a map"})
    progress = client.get(f"/schedule/{sid}").json()
    assert progress["predicted_makespan_s"] is None
    assert {w["planned_finish_s"] for w in progress["workers"].values()} == {None}


def test_the_shared_queue_has_no_planned_finish(client: TestClient) -> None:
    sid = client.post("/schedule", json=batch_body(policy="least_loaded")).json()["schedule_id"]
    workers = client.get(f"/schedule/{sid}").json()["workers"]
    assert workers["*"]["planned_finish_s"] is None
    assert workers["w0"]["planned_finish_s"] is not None

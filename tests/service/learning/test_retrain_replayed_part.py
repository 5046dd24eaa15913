"""A part whose publish answer was lost, and that the trainer sent again (a replay), is in its step's
set: an asked-for retrain keeps the step open until that part is reported, on the real embedded
valkey (chaos11's soak: ``c11-11-156b`` answered 503 after Redis stalled and restarted, its
publish had landed, the retry was replayed, and a retrain fitted step 156 without its rows)."""

from __future__ import annotations

from pathlib import Path

import redis
from fastapi.testclient import TestClient

from service.delivery import Delivery
from service.delivery import keys as keyspace
from tests.service.api_helpers import batch_body
from tests.service.learning.step_two import (
    finish,
    prompts_from,
    publish_second_part,
    ran_and_reported,
    report,
    retrained_steps,
)


def _second_part_body() -> dict[str, object]:
    return batch_body(prompts=4, step=2, schedule_id="step-2b") | {"batch": prompts_from(8, 4)}


def _published_with_its_answer_lost(client: TestClient, redis_client: redis.Redis) -> None:
    """``step-2b`` stored and announced, but not in the step's set: what a publish whose reply
    Redis never gave leaves (the request answered 503 before it entered the set)."""
    publish_second_part(client)
    redis_client.srem(keyspace.step_schedules(2), "step-2b")


def test_a_replayed_part_enters_its_step_s_set(client: TestClient, redis_client: redis.Redis) -> None:
    ran_and_reported(client, redis_client, "step-2a")
    _published_with_its_answer_lost(client, redis_client)
    response = client.post("/schedule", json=_second_part_body())
    assert response.status_code == 200
    assert response.json()["replayed"]
    assert redis_client.smembers(keyspace.step_schedules(2)) == {"step-2a", "step-2b"}


def test_a_replayed_part_settled_but_not_reported_keeps_the_step_open(
    client: TestClient, redis_client: redis.Redis, tmp_path: Path
) -> None:
    ran_and_reported(client, redis_client, "step-2a")
    _published_with_its_answer_lost(client, redis_client)
    assert client.post("/schedule", json=_second_part_body()).status_code == 200
    delivery = Delivery(redis_client)
    leases = [*delivery.claim("step-2b", "w0", 64), *delivery.claim("step-2b", "w1", 64)]
    finish(redis_client, leases)
    assert retrained_steps(client, tmp_path) == [0, 1]
    report(client, leases, "step-2b")
    assert retrained_steps(client, tmp_path) == [0, 1, 2]

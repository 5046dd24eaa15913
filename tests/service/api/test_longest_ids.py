"""The longest id of each kind the API accepts (``NAME_MAX_LENGTH``: worker, prompt and schedule ids)
goes through the whole step, POST /schedule -> claim -> complete: nothing the API accepts is refused by
the delivery protocol later. One character more is refused by the API itself, naming the field, before
anything is written."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from service.delivery import CompletionOutcome, Delivery
from service.names import NAME_MAX_LENGTH
from tests.service.api.badinput import redis_snapshot
from tests.service.api_helpers import batch_body
from tests.service.finished import RESULT


@pytest.fixture
def client(module_app: TestClient, redis_client: redis.Redis) -> TestClient:
    """The module's one app (``module_app``), on a Redis flushed for the test:
    a step is what Redis holds, a refusal the body's."""
    return module_app


def _body(worker_id: str, prompt_id: str, schedule_id: str, pinned: bool = False) -> dict[str, Any]:
    body = batch_body(prompts=1, n=2, workers=1, schedule_id=schedule_id)
    body["inventory"]["workers"][0]["worker_id"] = worker_id
    body["batch"]["items"][0]["prompt_id"] = prompt_id
    if pinned:  # a pin names the worker a second time, in the batch
        body["batch"]["items"][0]["pinned_worker"] = worker_id
    return body


def test_the_longest_ids_the_api_accepts_go_through_schedule_claim_and_complete(
    client: TestClient, redis_client: redis.Redis
) -> None:
    worker, prompt, sid = "w" * NAME_MAX_LENGTH, "p" * NAME_MAX_LENGTH, "s" * NAME_MAX_LENGTH
    response = client.post("/schedule", json=_body(worker, prompt, sid, pinned=True))
    assert response.status_code == 200, response.text
    delivery = Delivery(redis_client)
    assert delivery.schedules_for(worker) == [sid]
    leases = delivery.claim(sid, worker, 8)
    assert [le.item.prompt_id for le in leases] == [prompt, prompt]
    assert [delivery.complete(le, RESULT) for le in leases] == [CompletionOutcome.ACCEPTED] * 2
    assert client.get(f"/schedule/{sid}").json()["done"] == 2


@pytest.mark.parametrize(
    ("too_long", "field"),
    [
        ("worker", "inventory.workers[0].worker_id"),
        ("prompt", "batch.items[0].prompt_id"),
        ("schedule", "schedule_id"),
    ],
)
def test_an_id_one_character_too_long_is_a_422_naming_it_and_changes_nothing(
    client: TestClient, redis_client: redis.Redis, too_long: str, field: str
) -> None:
    ids = {
        kind: kind[0] * (NAME_MAX_LENGTH + (kind == too_long)) for kind in ("worker", "prompt", "schedule")
    }
    before = redis_snapshot(redis_client)
    response = client.post("/schedule", json=_body(ids["worker"], ids["prompt"], ids["schedule"]))
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field
    assert f"at most {NAME_MAX_LENGTH} characters" in response.json()["detail"]
    assert redis_snapshot(redis_client) == before

"""Prompts given as token ids (``batch.items[i].prompt_token_ids``), as veRL, OpenRLHF and slime hold
them: accepted, stored as the engine's ``prompt``, and each malformed list refused naming the field."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from service.api import schemas
from service.client import SchedulerAPIError, SchedulerClient
from service.delivery.protocol import Delivery
from service.pipeline.republish import work_digest
from service.settings import Settings
from tests.service.api.badinput import redis_snapshot
from tests.service.api_helpers import LiveServer, batch_body

IDS = [151644, 872, 198, 3838, 374, 220, 17, 10, 17, 30, 0, 2**31 - 1]  # a chat template's ids among them


def _ids_body(**item: Any) -> dict[str, Any]:
    """``batch_body`` whose prompt p0 is given as ``IDS`` (``prompt_tokens`` their count), its
    fields overridden by ``item``."""
    body = batch_body()
    first = body["batch"]["items"][0]
    del first["prompt"]
    first.update({"prompt_tokens": len(IDS), "prompt_token_ids": IDS, **item})
    return body


def test_a_prompt_of_token_ids_is_published_for_every_sample_as_the_engine_prompt(
    client: TestClient, redis_url: str
) -> None:
    response = client.post("/schedule", json=_ids_body())
    assert response.status_code == 200, response.text
    prompts = _claimed_prompts(Delivery.from_url(redis_url), response.json())
    assert {key: p for key, p in prompts.items() if key.startswith("p0#")} == {
        f"p0#{s}": IDS for s in range(4)
    }
    assert prompts["p1#0"] == "question 1"  # the text prompts beside it are untouched


def _both_text(body: dict[str, Any]) -> None:
    body["batch"]["items"][0]["prompt"] = "question 0"


def _both_chat(body: dict[str, Any]) -> None:
    body["batch"]["items"][0]["messages"] = [{"role": "user", "content": "hi"}]


REFUSALS: dict[str, tuple[dict[str, Any], str, str]] = {  # item fields -> field named, words of the detail
    "a count that disagrees with prompt_tokens": (
        {"prompt_tokens": 100},
        "batch.items[0].prompt_token_ids",
        f"{len(IDS)} token ids where prompt_tokens says 100",
    ),
    "a negative id": ({"prompt_token_ids": [5, 6, -1, *IDS[3:]]}, "batch.items[0].prompt_token_ids[2]", "0"),
    "an id past any vocabulary": (
        {"prompt_token_ids": [*IDS[:-1], 2**31]},
        f"batch.items[0].prompt_token_ids[{len(IDS) - 1}]",
        str(2**31 - 1),
    ),
    "an id that is not an integer": (
        {"prompt_token_ids": [*IDS[:-1], "17"]},
        f"batch.items[0].prompt_token_ids[{len(IDS) - 1}]",
        "integer",
    ),
    "no ids at all": ({"prompt_token_ids": []}, "batch.items[0].prompt_token_ids", "at least 1"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_malformed_token_id_list_is_a_422_naming_the_field_and_changes_nothing(
    case: str, client: TestClient, redis_client: redis.Redis
) -> None:
    client.post("/schedule", json=batch_body())  # some state to keep intact
    before = redis_snapshot(redis_client)
    item, field, words = REFUSALS[case]
    response = client.post("/schedule", json=_ids_body(**item))
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["field"] == field
    assert words in problem["detail"]
    assert redis_snapshot(redis_client) == before


@pytest.mark.parametrize(("other", "edit"), [("prompt", _both_text), ("messages", _both_chat)])
def test_token_ids_with_a_text_or_chat_prompt_beside_them_are_refused_naming_the_ids(
    other: str, edit: Any, client: TestClient, redis_client: redis.Redis
) -> None:
    before = redis_snapshot(redis_client)
    body = _ids_body()
    edit(body)
    response = client.post("/schedule", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == "batch.items[0].prompt_token_ids"
    assert f"give prompt_token_ids or {other}, not both" in response.json()["detail"]
    assert redis_snapshot(redis_client) == before


def test_one_prompt_longer_than_any_context_is_refused_by_its_count(client: TestClient) -> None:
    ids = [7] * (schemas.MAX_PROMPT_TOKEN_IDS + 1)
    response = client.post("/schedule", json=_ids_body(prompt_tokens=len(ids), prompt_token_ids=ids))
    assert response.status_code == 422
    assert response.json()["field"] == "batch.items[0].prompt_token_ids"
    assert str(schemas.MAX_PROMPT_TOKEN_IDS) in response.json()["detail"]


def test_a_batch_past_the_total_of_token_ids_is_refused_naming_the_items_and_both_counts(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(schemas, "MAX_BATCH_TOKEN_IDS", 20)  # the real bound needs a 16 MB+ body
    body = _ids_body()
    second = body["batch"]["items"][1]
    del second["prompt"]
    second.update({"prompt_tokens": len(IDS), "prompt_token_ids": IDS})
    response = client.post("/schedule", json=body)
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["field"] == "batch.items"
    assert f"the items carry {2 * len(IDS)} prompt token ids; at most 20" in problem["detail"]


def test_a_body_without_token_ids_keeps_the_work_digest_an_earlier_release_stored() -> None:
    # a retry across the upgrade is compared with its first attempt's digest: an item's unset ids
    # must not enter it, or every retry of a step published before would be refused as other work
    body = schemas.ScheduleRequest.model_validate(batch_body(schedule_id="run-step-1"))
    without = body.model_dump(mode="json", include={"batch", "sampling", "step"})
    for item in without["batch"]["items"]:
        del item["prompt_token_ids"]
    assert work_digest(body) == hashlib.sha256(json.dumps(without, sort_keys=True).encode()).hexdigest()
    with_ids = schemas.ScheduleRequest.model_validate({**_ids_body(), "schedule_id": "run-step-1"})
    assert work_digest(with_ids) != work_digest(body)


def _claimed_prompts(delivery: Delivery, plan: dict[str, Any]) -> dict[str, Any]:
    """Every published item's engine ``prompt``, by key, claimed from each planned worker's queue."""
    return {
        lease.key: lease.item.payload.get("prompt")
        for worker in plan["assignments"]
        for lease in delivery.claim(plan["schedule_id"], worker, 100)
    }


def test_the_python_client_sends_token_ids_typed_or_as_a_dict_and_raises_a_refusal_naming_them(
    live_settings: Settings, redis_client: redis.Redis
) -> None:
    delivery = Delivery(redis_client)
    with LiveServer(live_settings) as server, SchedulerClient(server.url) as client:
        typed = client.schedule(schemas.ScheduleRequest.model_validate(_ids_body()))
        as_dict = client.schedule(_ids_body())
        with pytest.raises(SchedulerAPIError) as refused:
            client.schedule(_ids_body(prompt_tokens=5))
    for plan in (typed, as_dict):
        assert _claimed_prompts(delivery, plan.model_dump())["p0#3"] == IDS
    assert refused.value.problem["field"] == "batch.items[0].prompt_token_ids"


def test_a_retry_is_told_from_other_work_by_its_token_ids(client: TestClient) -> None:
    first = client.post("/schedule", json={**_ids_body(), "schedule_id": "ids-step-1"})
    again = client.post("/schedule", json={**_ids_body(), "schedule_id": "ids-step-1"})
    other = client.post(
        "/schedule", json={**_ids_body(prompt_token_ids=[*IDS[:-1], 5]), "schedule_id": "ids-step-1"}
    )
    assert (first.status_code, again.status_code, again.json()["replayed"]) == (200, 200, True)
    assert (other.status_code, other.json()["field"]) == (422, "schedule_id")

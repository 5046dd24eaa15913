"""A field a trainer brings from its engine or framework (vLLM's ``max_tokens``, ``n``, ``logprobs``; a
sampling field set on an item) is refused naming where it belongs, not only that it is unknown."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from service.api.schemas import Sampling
from service.problems.hints import SAMPLING_FIELDS
from tests.service.api_helpers import batch_body


@pytest.fixture
def client(module_app: TestClient, redis_client: redis.Redis) -> TestClient:
    """The module's one app (``module_app``), on a Redis flushed for the test:
    a refusal is the body's."""
    return module_app


ITEM = "batch.items[1]"


def _with_sampling(**sampling: Any) -> dict[str, Any]:
    return batch_body(prompts=2, n=2, sampling=sampling)


def _item_with(**fields: Any) -> dict[str, Any]:
    body = batch_body(prompts=2, n=2)
    body["batch"]["items"][1].update(fields)
    return body


def _cap_as_max_tokens() -> dict[str, Any]:
    body = _item_with(max_tokens=512)
    del body["batch"]["items"][1]["max_new_tokens"]
    return body


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        (_with_sampling(logprobs=1), "sampling.logprobs", 'goes in sampling.extra, sent as given: {"extra"'),
        (_with_sampling(max_tokens=512), "sampling.max_tokens", "the cap is each item's max_new_tokens"),
        (_with_sampling(n=8), "sampling.n", "samples per prompt are each item's n"),
        (_item_with(sampling={"logprobs": 1}), f"{ITEM}.sampling.logprobs", f"in {ITEM}.sampling.extra"),
        (_item_with(temperature=0.6), f"{ITEM}.temperature", f"sampling fields go in {ITEM}.sampling"),
        (_cap_as_max_tokens(), "batch.items[1].max_tokens", "the cap is max_new_tokens"),
        (_item_with(input_ids=[1, 2]), f"{ITEM}.input_ids", f"token ids go in {ITEM}.prompt_token_ids"),
        (batch_body(temperature=1.0), "temperature", "sampling fields go in sampling"),
    ],
    ids=[
        "logprobs in sampling",
        "max_tokens in sampling",
        "n in sampling",
        "logprobs in an item's sampling",
        "temperature on an item",
        "max_tokens for an item's max_new_tokens",
        "veRL's input_ids on an item",
        "temperature at the top",
    ],
)
def test_a_misplaced_engine_field_is_refused_naming_where_it_belongs(
    body: dict[str, Any], field: str, says: str, client: TestClient
) -> None:
    response = client.post("/schedule", json=body)
    assert (response.status_code, response.json()["field"]) == (422, field), response.text
    assert says in response.json()["detail"]


def test_an_unknown_field_with_no_better_place_is_refused_as_before(client: TestClient) -> None:
    response = client.post("/schedule", json=batch_body(prompts=2, colour="blue"))
    assert (response.status_code, response.json()["field"]) == (422, "colour")
    assert response.json()["detail"] == "colour: Extra inputs are not permitted"


def test_the_hints_know_every_sampling_field_the_schema_has() -> None:
    assert frozenset(Sampling.model_fields) == SAMPLING_FIELDS


@pytest.mark.parametrize("name", ["query", "body", "float", "none", "constrained-str", "x[0]"])
@pytest.mark.parametrize("where", ["", "batch.items[1].", "sampling."])
def test_an_unknown_field_whose_name_reads_as_a_location_part_is_refused_naming_it(
    name: str, where: str, client: TestClient
) -> None:
    """Found by ``tests/service/api/test_fuzz_schedule.py``: pydantic's location of an error may end
    in a union member's tag (``float``, ``constrained-str``, ``function-after[...]``) and starts with
    the value's source (``body``, ``query``); an unknown field's own name that read as either was
    dropped, and the 422 named its parent (``body`` for one at the top), not the field to remove."""
    body = batch_body(prompts=2, n=2, sampling={"temperature": 1.0})
    parent = body["sampling"] if where == "sampling." else body["batch"]["items"][1] if where else body
    parent[name] = 1
    response = client.post("/schedule", json=body)
    assert (response.status_code, response.json()["field"]) == (422, f"{where}{name}"), response.text

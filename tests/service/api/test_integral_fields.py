"""Every integer field of ``POST /schedule`` reads a JSON number with no fraction as its integer, as
the counts do (``service.api.schemas.Whole``), and refuses a fraction naming the field and the value.

In round 66 a batch's ``n`` and the counts took ``2.0`` while ``max_num_seqs``, ``num_gpus``,
``seed``, ``top_k``, ``time_budget_ms``, ``kv_capacity_tokens`` and the token ids beside them refused
it (``Input should be a valid integer``): a body written from Python floats (``json.dumps`` of a
float, a pandas column) was refused one field at a time (user67). Each field is tried here, and the
list of them is held to the request's JSON schema, so a new integer field is tried too.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from pydantic import ValidationError

from service.api.learning_schemas import ActualsRequest
from service.api.schemas import MAX_PROMPT_TOKEN_IDS, BatchItem, ScheduleRequest
from service.problems.details import validation_details
from tests.service.api.test_integral_counts import COUNTS
from tests.service.api_helpers import batch_body

# each integer field of a /schedule body, as a 422 names it -> its integer in ``_body``
FIELDS = {
    "step": 3,
    "seed": 7,
    "time_budget_ms": 80,
    "batch.items[0].prompt_tokens": 100,
    "batch.items[0].n": 2,
    "batch.items[0].max_new_tokens": 2048,
    "batch.items[0].sampling.top_k": 40,
    "batch.items[0].sampling.seed": 6,
    "batch.items[0].sampling.stop_token_ids[0]": 8,
    "batch.items[1].prompt_token_ids[0]": 5,
    "sampling.top_k": 50,
    "sampling.seed": 5,
    "sampling.stop_token_ids[0]": 7,
    "inventory.workers[0].num_gpus": 1,
    "inventory.workers[0].max_num_seqs": 64,
    "inventory.workers[0].kv_capacity_tokens": 100_000,
}
_PART = re.compile(r"([A-Za-z_]+)|\[(\d+)\]")


@pytest.fixture
def client(module_app: TestClient, redis_client: redis.Redis) -> TestClient:
    """The module's one app (``module_app``), on a Redis flushed for the test."""
    return module_app


def _body() -> dict[str, Any]:
    """A dry-run body holding every field of ``FIELDS`` at its integer."""
    body = batch_body(prompts=2, n=2, workers=2, publish=False, step=3, seed=7, time_budget_ms=80)
    body["sampling"] = {"top_k": 50, "seed": 5, "stop_token_ids": [7]}
    first, second = body["batch"]["items"]
    first["sampling"] = {"top_k": 40, "seed": 6, "stop_token_ids": [8]}
    del second["prompt"]
    second.update(prompt_token_ids=[5, 6], prompt_tokens=2)
    body["inventory"]["workers"][0].update(num_gpus=1, kv_capacity_tokens=100_000)
    return body


def _with(path: str, value: object) -> dict[str, Any]:
    """``_body()`` with the field at ``path`` set to ``value``."""
    body = _body()
    parts: list[str | int] = [name or int(index) for name, index in _PART.findall(path)]
    holder: Any = body
    for part in parts[:-1]:
        holder = holder[part]
    assert holder[parts[-1]] == FIELDS[path]  # the path names a field the body holds
    holder[parts[-1]] = value
    return body


@pytest.mark.parametrize("path", FIELDS)
def test_an_integer_written_as_a_float_is_that_integer(client: TestClient, path: str) -> None:
    as_float = client.post("/schedule", json=_with(path, float(FIELDS[path])))
    as_integer = client.post("/schedule", json=_body())
    assert as_float.status_code == 200, as_float.json()
    assert as_float.json()["assignments"] == as_integer.json()["assignments"]  # read as the integer


@pytest.mark.parametrize("path", FIELDS)
def test_a_fraction_is_refused_naming_the_field_and_the_value(client: TestClient, path: str) -> None:
    fraction = FIELDS[path] + 0.5
    response = client.post("/schedule", json=_with(path, fraction))
    assert response.status_code == 422
    assert response.json()["field"] == path
    assert response.json()["detail"] == f"{path}={fraction!r}: expected an integer"


def _integers(schema: dict[str, Any], node: dict[str, Any], path: str) -> set[str]:
    """The paths of the integer fields under ``node`` of a JSON schema (``[]`` for a list's members)."""
    if "$ref" in node:
        return _integers(schema, schema["$defs"][node["$ref"].rsplit("/", 1)[1]], path)
    found = {path} if node.get("type") == "integer" else set()
    for member in node.get("anyOf", []):
        found |= _integers(schema, member, path)
    for name, field in node.get("properties", {}).items():
        found |= _integers(schema, field, f"{path}.{name}".lstrip("."))
    if "items" in node:
        found |= _integers(schema, node["items"], f"{path}[]")
    return found


def test_the_fields_tried_are_every_integer_field_of_the_requests() -> None:
    """A field the schema types ``integer`` that the tests above do not try would be one a float may
    be refused in unseen; ``POST /actuals``' are ``test_integral_counts``'."""
    schedule = ScheduleRequest.model_json_schema()
    assert _integers(schedule, schedule, "") == {re.sub(r"\[\d+\]", "[]", path) for path in FIELDS}
    actuals = ActualsRequest.model_json_schema()
    assert _integers(actuals, actuals, "") == {f"actuals[].{count}" for count in COUNTS}


@pytest.mark.parametrize(
    ("ids", "field"),
    [([5.0, 2**31], "prompt_token_ids[1]"), ([5.0] * (MAX_PROMPT_TOKEN_IDS + 1), "prompt_token_ids")],
    ids=["an id past int32", "one id too many"],
)
def test_token_ids_read_past_a_float_keep_their_bounds(ids: list[float], field: str) -> None:
    """A prompt's ids are read as strict ints first (pydantic's own loop, no Python call an id), and
    only a list that fails so is read id by id (``json_count``): the second reading holds the ids'
    bounds and the list's length as the first does, or a float let a list past them."""
    item = {"prompt_id": "p", "prompt_tokens": len(ids), "max_new_tokens": 8, "prompt_token_ids": ids}
    with pytest.raises(ValidationError) as refused:
        BatchItem.model_validate(item)
    assert validation_details(refused.value.errors())[1]["field"] == field

"""A 422 of a field check reads ``field=value: what is wrong``, as the core's refusals read
(``batch.items[3].prompt_id='p1': duplicate prompt_id ...``): pydantic's own checks (a step, a length,
a capacity, a worker count, a device name) named the field alone, ``batch.items[0].n: Input should be
greater than or equal to 1``, the value only in the problem's ``value`` member, so a trainer reading
its log line (the client's ``SchedulerAPIError`` carries the detail) could not tell which value it
sent. A field not sent, an unknown one and a refused map key name no value (the field is the fault).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from service.problems.details import ECHO_HEAD, validation_details
from tests.service.api.badinput import set_at
from tests.service.api_helpers import batch_body


@pytest.fixture
def client(module_app: TestClient, redis_client: redis.Redis) -> TestClient:
    """The module's one app (``module_app``), on a Redis flushed for the test: a refusal is the body's."""
    return module_app


# a bad /schedule body: the path and value set, and how its detail leads
LEADS: dict[str, tuple[str, Any, str]] = {
    "a negative step": ("step", -1, "step=-1"),
    "a step as text": ("step", "three", "step='three'"),
    "a prompt of no token": ("batch.items.0.prompt_tokens", 0, "batch.items[0].prompt_tokens=0"),
    "a negative cap": ("batch.items.2.max_new_tokens", -5, "batch.items[2].max_new_tokens=-5"),
    "no samples": ("batch.items.1.n", 0, "batch.items[1].n=0"),
    "samples as null": ("batch.items.1.n", None, "batch.items[1].n=null"),
    "a KV capacity of 0": (
        "inventory.workers.0.kv_capacity_tokens",
        0,
        "inventory.workers[0].kv_capacity_tokens=0",
    ),
    "no GPU": ("inventory.workers.1.num_gpus", 0, "inventory.workers[1].num_gpus=0"),
    "a fraction of sequences": (
        "inventory.workers.0.max_num_seqs",
        1.5,
        "inventory.workers[0].max_num_seqs=1.5",
    ),
    "an empty device": ("inventory.workers.1.device", "", "inventory.workers[1].device=''"),
    "a quantile past 1": ("quantile", 1.5, "quantile=1.5"),
    "a flag as text": ("prefix_affinity", "maybe", "prefix_affinity='maybe'"),
    "a temperature below 0": ("sampling", {"temperature": -0.5}, "sampling.temperature=-0.5"),
}


@pytest.mark.parametrize(("path", "value", "lead"), LEADS.values(), ids=LEADS.keys())
def test_a_field_check_s_detail_names_the_field_and_the_value(
    path: str, value: Any, lead: str, client: TestClient
) -> None:
    body = batch_body()
    set_at(path, value)(body)
    response = client.post("/schedule", json=body)
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["detail"].startswith(f"{lead}: "), problem["detail"]
    assert lead.startswith(f"{problem['field']}=")


def test_a_query_value_is_named_as_sent(client: TestClient) -> None:
    problem = client.get("/schedule/s1/results", params={"wait_ms": "soon"}).json()
    assert problem["detail"].startswith("wait_ms='soon': "), problem["detail"]


def test_a_long_value_is_named_by_its_start_and_its_size(client: TestClient) -> None:
    text = "q" * ECHO_HEAD + "r" * 100_000
    body = batch_body()
    body["batch"]["items"][2]["prompt_id"] = text
    response = client.post("/schedule", json=body)
    lead = f"batch.items[2].prompt_id='{'q' * ECHO_HEAD}'... ({len(text)} characters): "
    assert response.json()["detail"].startswith(lead), response.json()["detail"]
    assert "r" * 100 not in response.text


def test_a_long_text_s_start_is_quoted_as_a_short_one_is(client: TestClient) -> None:
    """A prompt whose lone surrogate the service refuses (``\\ud800``: JSON carries it, UTF-8 does
    not), a newline before it: named unquoted, the start split the client's error across lines, and
    the surrogate made it a message ``print`` or a UTF-8 log file could not write (review66)."""
    text = "line one\n\ud800" + "q" * 1_000
    body = batch_body()
    body["batch"]["items"][0]["prompt"] = text
    sent = json.dumps(body)  # escaped: httpx's own encoding refuses the surrogate
    problem = client.post("/schedule", content=sent, headers={"Content-Type": "application/json"}).json()
    start = repr(text[:ECHO_HEAD])
    assert problem["detail"].startswith(f"batch.items[0].prompt={start}... ({len(text)} characters): ")
    assert "\n" not in problem["detail"]
    problem["detail"].encode("utf-8")  # a lone surrogate: UnicodeEncodeError


@pytest.mark.parametrize(
    ("edit", "detail"),
    [
        (
            lambda body: body["batch"]["items"][0].pop("prompt_tokens"),
            "batch.items[0].prompt_tokens: Field required",
        ),
        (set_at("colour", "blue"), "colour: Extra inputs are not permitted"),
        (
            set_at("inventory.workers", []),
            "inventory.workers: List should have at least 1 item after validation, not 0",
        ),
    ],
    ids=["a missing field", "an unknown field", "an empty list"],
)
def test_a_fault_of_the_field_itself_names_no_value(edit: Any, detail: str, client: TestClient) -> None:
    body = batch_body()
    edit(body)
    assert client.post("/schedule", json=body).json()["detail"] == detail


def test_a_missing_query_parameter_is_not_named_null() -> None:
    """FastAPI reports a query parameter not sent with the input None, which no caller sent."""
    missing = {"type": "missing", "loc": ("query", "after"), "msg": "Field required", "input": None}
    assert validation_details([missing])[0] == "after: Field required"


def test_a_refused_feature_name_is_not_named_twice() -> None:
    """A map key's refusal is located at the key (``(..., name, "[key]")``), its input the name."""
    refused = {"type": "value_error", "loc": ("body", "features", "score", "[key]"), "msg": "bad name"}
    assert validation_details([{**refused, "input": "score"}])[0] == "features.score: bad name"

"""A 422's detail and ``errors[]`` at their edges (``service/problems/details.py``): a boolean at fault
is named as the JSON sent it, and ``errors[]`` carries each error's field, message and type only.
Found by mutation testing of round 65's code (docs/experiments.md, "Mutation testing of round 65's new
code"): each test states a behaviour no earlier test reached.
"""

from __future__ import annotations

import pytest
import redis
from fastapi.testclient import TestClient

from tests.service.api.badinput import set_at
from tests.service.api_helpers import batch_body


@pytest.fixture
def client(module_app: TestClient, redis_client: redis.Redis) -> TestClient:
    """The module's one app (``module_app``), on a Redis flushed for the test: a refusal is the body's."""
    return module_app


@pytest.mark.parametrize(("value", "lead"), [(True, "true"), (False, "false")])
def test_a_boolean_at_fault_is_named_as_json_sent_it(value: bool, lead: str, client: TestClient) -> None:
    """``prompt_id=true``, as the body read, not Python's ``True``."""
    body = batch_body()
    set_at("batch.items.0.prompt_id", value)(body)
    problem = client.post("/schedule", json=body).json()
    assert problem["detail"].startswith(f"batch.items[0].prompt_id={lead}: "), problem["detail"]


def test_errors_carry_each_field_message_and_type_and_nothing_more(client: TestClient) -> None:
    body = batch_body()
    set_at("step", -1)(body)
    set_at("colour", "blue")(body)
    errors = client.post("/schedule", json=body).json()["errors"]
    assert len(errors) == 2
    assert [sorted(error) for error in errors] == [["field", "message", "type"]] * 2

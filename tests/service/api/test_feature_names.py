"""A request's feature named as a trace column, or by another tool's name for one, is refused: a 422
naming ``features.<name>`` and the field to use, and nothing stored. Accepted, such a feature was
folded into the history beside the trace's own column and trained on: ``completion_tokens`` equal to
the output handed the model the length it is to predict (api60)."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from scheduler.trace import OPTIONAL_COLUMNS, REQUIRED_COLUMNS
from tests.service.api.badinput import redis_snapshot
from tests.service.api_helpers import actual_history, actual_report, batch_body


@pytest.fixture
def client(module_app: TestClient, redis_client: redis.Redis) -> TestClient:
    """The module's one app, on a Redis flushed for the test: each refusal is the body's alone."""
    return module_app


def _refused(client: TestClient, store: redis.Redis, url: str, body: dict[str, Any]) -> dict[str, Any]:
    """The 422 problem ``url`` answered ``body`` with, Redis checked exactly as it was."""
    before = redis_snapshot(store)
    response = client.post(url, json=body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert redis_snapshot(store) == before
    problem: dict[str, Any] = response.json()
    return problem


# another tool's name -> the item's field to use, or what the trace's column is (not known before a run)
ITEM_ALIASES = {
    "max_tokens": "the item's field is 'max_new_tokens': set it there",
    "max_completion_tokens": "the item's field is 'max_new_tokens'",
    "max_output_tokens": "the item's field is 'max_new_tokens'",
    "max_response_length": "the item's field is 'max_new_tokens'",
    "prompt_length": "the item's field is 'prompt_tokens'",
    "input_tokens": "the item's field is 'prompt_tokens'",
    "completion_tokens": "the trace's column is 'output_tokens', the length a run reports",
    "response_length": "the trace's column is 'output_tokens', the length a run reports",
    "score": "the trace's column is 'reward', what a run reports",
    "Max_Tokens": "the item's field is 'max_new_tokens'",  # matched casefolded, as a trace reader does
}


@pytest.mark.parametrize("name", sorted(ITEM_ALIASES))
def test_an_item_feature_named_by_another_tools_name_is_refused_naming_the_field_to_use(
    name: str, client: TestClient, redis_client: redis.Redis
) -> None:
    client.post("/schedule", json=batch_body())  # some state to keep intact
    body = batch_body()
    body["batch"]["items"][2]["features"] = {"difficulty": 3, name: 512}
    problem = _refused(client, redis_client, "/schedule", body)
    assert problem["field"] == f"batch.items[2].features.{name}"
    assert problem["value"] == name
    assert ITEM_ALIASES[name] in problem["detail"]
    keep = "a feature may not carry a trace column's name nor another tool's name for one"
    assert keep in problem["detail"]


@pytest.mark.parametrize("column", REQUIRED_COLUMNS + OPTIONAL_COLUMNS)
def test_an_item_feature_named_as_a_trace_column_is_refused(
    column: str, client: TestClient, redis_client: redis.Redis
) -> None:
    body = batch_body()
    body["batch"]["items"][0]["features"] = {column: 7}
    problem = _refused(client, redis_client, "/schedule", body)
    assert problem["field"] == f"batch.items[0].features.{column}"
    assert f"{column!r} is a trace column" in problem["detail"]


@pytest.mark.parametrize(
    ("name", "field"),
    [
        ("completion_tokens", "output_tokens"),
        ("response_length", "output_tokens"),
        ("score", "reward"),
        ("max_tokens", "max_new_tokens"),
        ("prompt_length", "prompt_tokens"),
        ("INPUT_TOKENS", "prompt_tokens"),
    ],
)
def test_a_report_feature_named_by_another_tools_name_is_refused_and_nothing_stored(
    name: str, field: str, client: TestClient, redis_client: redis.Redis
) -> None:
    reports = actual_history(steps=1)
    reports[5]["features"] = {name: reports[5]["output_tokens"]}  # the answer, as a feature
    problem = _refused(client, redis_client, "/actuals", {"actuals": reports})
    assert problem["field"] == f"actuals[5].features.{name}"
    assert f"the report's field is {field!r}: set it there" in problem["detail"]
    assert redis_client.exists("rs:actuals") == 0


@pytest.mark.parametrize("column", REQUIRED_COLUMNS + OPTIONAL_COLUMNS)
def test_a_report_feature_named_as_a_trace_column_is_refused(
    column: str, client: TestClient, redis_client: redis.Redis
) -> None:
    report = actual_report(0, 1, 0) | {"features": {column: 1.0}}
    problem = _refused(client, redis_client, "/actuals", {"actuals": [report]})
    assert problem["field"] == f"actuals[0].features.{column}"
    assert f"{column!r} is a trace column, the report's own field" in problem["detail"]
    assert redis_client.exists("rs:actuals") == 0


def test_a_trace_columns_name_in_another_case_stays_a_feature_as_in_a_trace_file(
    client: TestClient, redis_client: redis.Redis
) -> None:
    # a file may hold ``Output_Tokens`` beside ``output_tokens`` (a feature); only the exact name clashes
    report = actual_report(0, 1, 0) | {"features": {"Output_Tokens": 3.0, "difficulty": "hard"}}
    assert client.post("/actuals", json={"actuals": [report]}).status_code == 200
    body = batch_body(publish=False)
    body["batch"]["items"][0]["features"] = {"Step": 1, "difficulty": "hard"}
    assert client.post("/schedule", json=body).status_code == 200

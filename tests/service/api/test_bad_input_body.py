"""A body that is not JSON the service can read: a problem naming the body and why, not a 500."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from tests.service.api.badinput import JSON_HEADERS


def test_malformed_json_is_a_422_problem_naming_the_body_and_where_it_broke(client: TestClient) -> None:
    response = client.post("/schedule", content=b"{not json", headers={"Content-Type": "application/json"})
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["field"] == "body"
    assert "at character 1" in response.json()["detail"]


def test_a_422_echoing_a_lone_surrogate_is_still_a_readable_problem(client: TestClient) -> None:
    report = {"step": 1, "prompt_id": "\ud800", "sample_idx": 0, "worker_id": "w", "prompt_tokens": 1}
    report |= {"output_tokens": 1, "finish_reason": "stop"}
    raw = json.dumps({"actuals": [report]})
    response = client.post("/actuals", content=raw, headers=JSON_HEADERS)
    assert response.status_code == 422
    assert response.json()["field"] == "actuals[0].prompt_id"


def test_json_nested_past_the_parser_s_depth_is_a_400_naming_the_body(client: TestClient) -> None:
    raw = '{"batch": ' + "[" * 5000 + "]" * 5000 + "}"
    response = client.post("/schedule", content=raw, headers=JSON_HEADERS)
    assert response.status_code == 400
    assert (response.json()["field"], response.json()["title"]) == ("body", "Bad Request")


@pytest.mark.parametrize("content_type", ["text/json", "application/jsonx"])
def test_a_json_lookalike_content_type_is_told_to_send_json(content_type: str, client: TestClient) -> None:
    response = client.post("/schedule", content=b"{}", headers={"Content-Type": content_type})
    assert "Content-Type: application/json" in response.json()["detail"]


def test_a_body_sent_as_another_content_type_is_told_to_send_json(client: TestClient) -> None:
    response = client.post("/schedule", content=b"x=1", headers={"Content-Type": "text/plain"})
    assert response.status_code == 422
    assert response.json()["field"] == "body"
    assert "Content-Type: application/json" in response.json()["detail"]


@pytest.mark.parametrize(
    ("raw", "cause"),
    [
        ('{"step": ' + "9" * 5000 + "}", "4300 digits"),  # past Python's int-conversion limit
        ('{"batch": ' + "[" * 5000 + "]" * 5000 + "}", "recursion"),
        (b'{"step": "\xff"}', "utf-8"),
    ],
)
def test_a_body_that_cannot_be_decoded_says_why(raw: str | bytes, cause: str, client: TestClient) -> None:
    response = client.post("/schedule", content=raw, headers=JSON_HEADERS)
    assert response.status_code == 400
    assert cause in response.json()["detail"].lower(), response.json()  # not only 'error parsing the body'

"""A body that is not JSON the service can read: a problem naming the body and why, not a 500."""

from __future__ import annotations

import json

import pytest
import redis
from fastapi.testclient import TestClient

from tests.service.api.badinput import JSON_HEADERS, redis_snapshot
from tests.service.api_helpers import actual_report, batch_body


@pytest.fixture
def client(module_app: TestClient, redis_client: redis.Redis) -> TestClient:
    """The module's one app (``module_app``), on a Redis flushed for the test:
    what is refused is the body."""
    return module_app


PROBLEMS = "https://rollout-scheduler.dev/problems"


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


@pytest.mark.parametrize(
    ("encoding", "named"),
    [
        ("utf-16", "UTF-16 (it starts with a UTF-16 byte-order mark, FF FE)"),
        ("utf-32", "UTF-32 (it starts with a UTF-32 byte-order mark, FF FE 00 00)"),
        ("utf-16-be", "UTF-16-BE (by the NUL bytes of its first characters)"),
        ("utf-32-le", "UTF-32-LE (by the NUL bytes of its first characters)"),
    ],
)
def test_a_body_in_utf16_or_utf32_is_a_400_naming_the_body_and_stores_nothing(
    encoding: str, named: str, client: TestClient, redis_client: redis.Redis
) -> None:
    """Python's JSON decoder reads these from the bytes (a byte-order mark, or NULs): they were
    stored, where docs/api.md says a body that is not UTF-8 is a 400."""
    before = redis_snapshot(redis_client)
    body = json.dumps({"actuals": [actual_report(0, 0, 0)]}).encode(encoding)

    response = client.post("/actuals", content=body, headers=JSON_HEADERS)

    assert response.status_code == 400, response.text
    problem = response.json()
    assert (problem["field"], problem["type"]) == ("body", f"{PROBLEMS}/body-not-utf8")
    assert problem["detail"] == f"the body is {named}, not UTF-8"
    assert redis_snapshot(redis_client) == before


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32"])
def test_a_byte_order_mark_in_the_text_of_a_utf16_body_is_a_400_too_not_a_json_error(
    encoding: str, client: TestClient
) -> None:
    """What some Windows tools write: the decoder took the first mark and choked on the second (422)."""
    response = client.post("/actuals", content="\ufeff{}".encode(encoding), headers=JSON_HEADERS)
    assert (response.status_code, response.json()["field"]) == (400, "body")


def test_a_body_with_a_utf8_byte_order_mark_is_utf8_and_read(client: TestClient) -> None:
    body = json.dumps({"actuals": [actual_report(0, 0, 0)]}).encode("utf-8-sig")
    response = client.post("/actuals", content=body, headers=JSON_HEADERS)
    assert (response.status_code, response.json()["accepted"]) == (200, 1)


@pytest.mark.parametrize(("first", "last", "status"), [("bogus", "lpt", 200), ("lpt", "bogus", 422)])
def test_a_name_given_twice_in_an_object_counts_once_with_its_last_value(
    first: str, last: str, status: int, client: TestClient
) -> None:
    """As Python's decoder reads it, and as docs/api.md says (send each name once)."""
    body = json.dumps({**batch_body(publish=False), "policy": "PLACEHOLDER"})
    body = body.replace('"policy": "PLACEHOLDER"', f'"policy": "{first}", "policy": "{last}"')
    response = client.post("/schedule", content=body, headers=JSON_HEADERS)
    assert response.status_code == status, response.text
    assert response.json().get("policy", response.json().get("value")) == last

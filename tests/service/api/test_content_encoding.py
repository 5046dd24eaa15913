"""A body sent with a content coding (``Content-Encoding: gzip``) is refused with 415, unread: the
service reads bodies as sent (identity), so a compressed body was refused as "not UTF-8" (400, a
misleading cause) and a plain one labelled compressed was read as if it were not."""

from __future__ import annotations

import gzip
import json
import zlib

import pytest
import redis
from fastapi.testclient import TestClient

from tests.service.api.badinput import JSON_HEADERS, redis_snapshot
from tests.service.api_helpers import TRAINER, actual_report, batch_body, bearer

PROBLEMS = "https://rollout-scheduler.dev/problems"
ACTUALS = json.dumps({"actuals": [actual_report(0, 0, 0)]}).encode()


@pytest.mark.parametrize(
    ("coding", "body"),
    [("gzip", gzip.compress(ACTUALS)), ("deflate", zlib.compress(ACTUALS)), ("br", ACTUALS)],
)
def test_a_body_with_a_content_coding_is_a_415_naming_it_and_stores_nothing(
    coding: str, body: bytes, client: TestClient, redis_client: redis.Redis
) -> None:
    before = redis_snapshot(redis_client)

    response = client.post("/actuals", content=body, headers={**JSON_HEADERS, "Content-Encoding": coding})

    assert response.status_code == 415, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["accept-encoding"] == "identity"
    problem = response.json()
    assert problem["type"] == f"{PROBLEMS}/unsupported-content-encoding"
    assert (problem["field"], problem["value"]) == ("Content-Encoding", coding)
    assert redis_snapshot(redis_client) == before


def test_a_plan_sent_gzipped_is_a_415_not_a_400_about_utf8(client: TestClient) -> None:
    body = gzip.compress(json.dumps(batch_body()).encode())
    response = client.post("/schedule", content=body, headers={**JSON_HEADERS, "Content-Encoding": "gzip"})
    assert response.status_code == 415, response.text
    assert "Content-Encoding" in response.json()["detail"]


@pytest.mark.parametrize("coding", ["identity", "Identity", ""])
def test_an_identity_coding_is_read_as_usual(coding: str, client: TestClient) -> None:
    response = client.post("/actuals", content=ACTUALS, headers={**JSON_HEADERS, "Content-Encoding": coding})
    assert (response.status_code, response.json()["accepted"]) == (200, 1)


def test_the_token_is_checked_before_the_coding(secured: TestClient) -> None:
    body = gzip.compress(ACTUALS)
    unauthenticated = secured.post(
        "/actuals", content=body, headers={**JSON_HEADERS, "Content-Encoding": "gzip"}
    )
    authenticated = secured.post(
        "/actuals", content=body, headers={**JSON_HEADERS, "Content-Encoding": "gzip", **bearer(TRAINER)}
    )
    assert (unauthenticated.status_code, authenticated.status_code) == (401, 415)

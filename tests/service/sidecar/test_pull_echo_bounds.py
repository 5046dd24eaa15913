"""What a worker sent is echoed in an error or a log line only cut short: a megabyte of key, schedule id
or unknown field name makes neither a megabyte of answer nor a megabyte of log record."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest
import redis

from tests.service.sidecar.pullclient import done_body, publish_one, with_api

HUGE = 1_000_000
SMALL = 1_000  # bytes of any answer or log line below: the start of the text and its size


def test_a_huge_unknown_field_key_or_schedule_id_is_named_by_its_start_and_size(
    redis_client: redis.Redis, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    publish_one(redis_url, "echo")

    async def script(client: httpx.AsyncClient) -> list[httpx.Response]:
        body = done_body((await client.get("/next")).json(), 5)
        lease = {name: body[name] for name in ("schedule_id", "key", "token")}
        return [
            await client.post("/done", json={**body, "x" * HUGE: 1}),  # an unknown field: 422
            await client.post("/done", json={**body, "key": "k" * HUGE}),  # no lease of it: 409 stale
            await client.post("/fail", json={**lease, "key": "k" * HUGE}),  # the same, as a failure
            await client.post("/done", json={**body, "schedule_id": "s" * HUGE, "token": 1}),  # 404
        ]

    with caplog.at_level(logging.INFO):
        answers: list[Any] = with_api(redis_url, script)
    assert [a.status_code for a in answers] == [422, 409, 200, 404]
    assert all(len(a.content) < SMALL for a in answers), [len(a.content) for a in answers]
    assert answers[0].json()["error"].startswith(f"{'x' * 32}... ({HUGE} characters): Extra inputs")
    assert answers[1].json()["error"].startswith(f"key='{'k' * 32}... ({HUGE} characters)'")
    assert answers[3].json()["error"].startswith(f"schedule_id='{'s' * 32}... ({HUGE} characters)'")
    assert max(len(record.getMessage()) for record in caplog.records) < SMALL

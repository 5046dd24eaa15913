"""The pull API as an HTTP surface: bodies read as strictly as the service's, every error an
``{"error"}`` naming what is wrong (a wrong method, an unknown path, a trailing slash), and the probes
answering ``HEAD``; a refused report leaves the lease held and nothing stored."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import redis

from service.sidecar.pull_api import MAX_BODY_BYTES
from tests.service.sidecar.pullclient import done_body, publish_one, with_api


def test_a_string_or_boolean_where_a_number_belongs_is_refused_and_the_lease_is_kept(
    redis_client: redis.Redis, redis_url: str
) -> None:
    delivery = publish_one(redis_url, "strict")

    async def script(client: httpx.AsyncClient) -> list[Any]:
        body = done_body((await client.get("/next")).json(), 5)
        sent = [
            await client.post("/done", json={**body, "output_tokens": "5"}),
            await client.post("/done", json={**body, "token": str(body["token"])}),
            await client.post("/fail", json={**body, "token": True}),
            await client.post("/done", json={**body, "wall_time_s": "1.5"}),
        ]
        held = len((await client.get("/leases")).json()["held"])
        return [*((r.status_code, r.json()["error"]) for r in sent), held, body["token"]]

    *refused, token = with_api(redis_url, script)
    assert refused == [
        (422, "output_tokens='5': Input should be a valid integer"),
        (422, f"token='{token}': Input should be a valid integer"),
        (422, "token=true: Input should be a valid integer (and 1 more)"),  # output_tokens: not /fail's
        (422, "wall_time_s='1.5': Input should be a valid number"),
        1,
    ]
    assert delivery.read_results("strict") == []


def test_a_wrong_method_or_an_unknown_path_is_an_error_naming_the_request(redis_url: str) -> None:
    async def script(client: httpx.AsyncClient) -> list[Any]:
        sent = [await client.get("/done"), await client.put("/next"), await client.get("/nope")]
        return [(r.status_code, r.headers.get("allow"), r.json()) for r in sent]

    assert with_api(redis_url, script) == [
        (405, "POST", {"error": "GET /done: Method Not Allowed"}),
        (405, "GET", {"error": "PUT /next: Method Not Allowed"}),
        (404, None, {"error": "GET /nope: Not Found"}),
    ]


def test_a_trailing_slash_is_a_404_naming_the_path_without_it_not_a_redirect(
    redis_client: redis.Redis, redis_url: str
) -> None:
    delivery = publish_one(redis_url, "slash")

    async def script(client: httpx.AsyncClient) -> list[Any]:
        body = done_body((await client.get("/next")).json(), 5)
        slashed = [await client.get("/next/"), await client.post("/done/", json=body)]
        held = len((await client.get("/leases")).json()["held"])
        return [*((r.status_code, r.headers.get("location"), r.json()["error"]) for r in slashed), held]

    assert with_api(redis_url, script) == [
        (404, None, "GET /next/: Not Found; the path takes no trailing slash: /next"),
        (404, None, "POST /done/: Not Found; the path takes no trailing slash: /done"),
        1,
    ]
    assert delivery.read_results("slash") == []


def test_a_body_too_deeply_nested_to_decode_is_a_400_naming_the_body(redis_url: str) -> None:
    async def script(client: httpx.AsyncClient) -> tuple[int, str]:
        deep = b"[" * 100_000 + b"]" * 100_000
        sent = await client.post("/done", content=deep, headers={"Content-Type": "application/json"})
        return sent.status_code, sent.json()["error"]

    status, error = with_api(redis_url, script)
    assert (status, error.split(" (")[0]) == (400, "body: There was an error parsing the body")
    assert "recursion" in error


def test_the_probes_answer_head_as_get_and_a_405_lists_both(redis_url: str) -> None:
    async def script(client: httpx.AsyncClient) -> list[Any]:
        heads = [await client.head(path) for path in ("/health", "/ready", "/metrics")]
        wrong = await client.post("/health")
        return [*((r.status_code, r.content) for r in heads), (wrong.status_code, wrong.headers["allow"])]

    assert with_api(redis_url, script) == [(200, b""), (200, b""), (200, b""), (405, "GET, HEAD")]


def test_a_report_past_the_body_limit_is_a_413_error_and_the_lease_is_kept(
    redis_client: redis.Redis, redis_url: str
) -> None:
    delivery = publish_one(redis_url, "huge")

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it is read
        for _ in range(17):
            yield b" " * 1024 * 1024

    async def script(client: httpx.AsyncClient) -> list[Any]:
        body = done_body((await client.get("/next")).json(), 5)
        output = "x" * (MAX_BODY_BYTES + 1)
        declared = await client.post("/done", json={**body, "output": output})
        chunked = await client.post("/done", content=chunks(), headers={"Content-Type": "application/json"})
        held = len((await client.get("/leases")).json()["held"])
        return [*((r.status_code, r.json()["error"]) for r in (declared, chunked)), held]

    declared, chunked, held = with_api(redis_url, script)
    assert declared[0] == chunked[0] == 413
    assert declared[1].startswith("body: too large (declared Content-Length ")
    assert (
        chunked[1]
        == f"body: too large (more than {MAX_BODY_BYTES} bytes received); the limit is {MAX_BODY_BYTES} bytes"
    )
    assert held == 1
    assert delivery.read_results("huge") == []


def test_a_wait_that_is_not_a_finite_number_is_refused_as_such(redis_url: str) -> None:
    async def script(client: httpx.AsyncClient) -> list[Any]:
        sent = [await client.get(f"/next?wait_s={wait}") for wait in ("nan", "inf", "-1", "31")]
        return [(r.status_code, r.json()["error"]) for r in sent]

    assert with_api(redis_url, script) == [
        (422, "wait_s='nan': Input should be a finite number"),
        (422, "wait_s='inf': Input should be a finite number"),
        (422, "wait_s='-1': Input should be greater than or equal to 0"),
        (422, "wait_s='31': Input should be less than or equal to 30"),
    ]

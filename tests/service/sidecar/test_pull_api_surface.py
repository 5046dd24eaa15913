"""The pull API as an HTTP surface: bodies read as strictly as the service's, every error an
``{"error"}`` naming what is wrong (a wrong method, an unknown path, a trailing slash), and the probes
answering ``HEAD``; a refused report leaves the lease held and nothing stored."""

from __future__ import annotations

from typing import Any

import httpx
import redis

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
        return [*((r.status_code, r.json()["error"]) for r in sent), held]

    assert with_api(redis_url, script) == [
        (422, "output_tokens: Input should be a valid integer"),
        (422, "token: Input should be a valid integer"),
        (422, "token: Input should be a valid integer; output_tokens: Extra inputs are not permitted"),
        (422, "wall_time_s: Input should be a valid number"),
        1,
    ]
    assert delivery.read_results("strict") == []

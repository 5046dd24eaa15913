"""``/done``'s ``output_tokens`` is held to the service's bound (``2**31 - 1``) by the body itself, not
only by the item's cap: a report of a lease whose item the sidecar cannot find (no longer published,
or Redis not answering the look-up: the report then goes on without a cap to check) is still refused
422 naming the count, before anything is stored, rather than answered about its lease. A count past
the bound is no length any engine produced, and ``POST /actuals`` would refuse the result it made."""

from __future__ import annotations

import httpx
import redis

from tests.service.sidecar.pullclient import done_body, publish_one, with_api


def test_an_output_past_the_bound_is_a_422_on_a_lease_of_no_known_item(
    redis_client: redis.Redis, redis_url: str
) -> None:
    delivery = publish_one(redis_url, "bound")

    async def script(client: httpx.AsyncClient) -> tuple[int, str]:
        lease = (await client.get("/next")).json()
        body = {**done_body(lease, 2**31), "key": "no-such-item"}
        response = await client.post("/done", json=body)
        return response.status_code, response.json()["error"]

    status, error = with_api(redis_url, script)
    assert status == 422
    assert error.startswith(f"output_tokens={2**31}: ")
    assert delivery.read_results("bound") == []

"""The pull API's ``/done`` reads an output length sent as ``5.0`` as 5, as ``POST /actuals`` and a
trace do (``scheduler.trace.json_count``): a worker whose lengths went through a float (a numpy count,
a pandas column) was refused 422 where the service and the trace take the same number; a fraction,
``true`` and the text ``"5"`` stay refused, naming ``output_tokens``, the lease kept."""

from __future__ import annotations

from typing import Any

import httpx
import redis

from tests.service.sidecar.pullclient import done_body, publish_one, with_api


def test_an_integral_output_length_is_stored_as_the_integer(
    redis_client: redis.Redis, redis_url: str
) -> None:
    delivery = publish_one(redis_url, "whole")

    async def script(client: httpx.AsyncClient) -> int:
        body = {**done_body((await client.get("/next")).json(), 5), "output_tokens": 5.0}
        return (await client.post("/done", json=body)).status_code

    assert with_api(redis_url, script) == 200
    [stored] = delivery.read_results("whole")
    assert stored.result.output_tokens == 5
    assert type(stored.result.output_tokens) is int


def test_what_is_no_integer_is_refused_naming_the_field(redis_client: redis.Redis, redis_url: str) -> None:
    delivery = publish_one(redis_url, "fraction")

    async def script(client: httpx.AsyncClient) -> list[Any]:
        body = done_body((await client.get("/next")).json(), 5)
        sent = [await client.post("/done", json={**body, "output_tokens": v}) for v in (5.5, True, "5")]
        held = len((await client.get("/leases")).json()["held"])
        return [*((r.status_code, r.json()["error"]) for r in sent), held]

    assert with_api(redis_url, script) == [
        (422, "output_tokens=5.5: expected an integer"),  # the value once, led as the service's
        (422, "output_tokens=true: Input should be a valid integer"),
        (422, "output_tokens='5': Input should be a valid integer"),
        1,
    ]
    assert delivery.read_results("fraction") == []


def test_every_integer_of_a_done_takes_its_float_as_output_tokens_does(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """The lease token and ``extra``'s token counts refused ``5.0`` where ``output_tokens`` beside them
    took it (user67); an integral float is stored as its integer (the trainer's client reads an int)."""
    delivery = publish_one(redis_url, "floats")

    async def script(client: httpx.AsyncClient) -> int:
        lease = (await client.get("/next")).json()
        extra = {"prompt_tokens": 100.0, "max_new_tokens": 16000.0}
        body = {**done_body(lease, 5), "token": float(lease["token"]), "extra": extra}
        return (await client.post("/done", json=body)).status_code

    assert with_api(redis_url, script) == 200
    [stored] = delivery.read_results("floats")
    counts = {name: stored.result.extra[name] for name in ("prompt_tokens", "max_new_tokens")}
    assert counts == {"prompt_tokens": 100, "max_new_tokens": 16000}
    assert {type(count) for count in counts.values()} == {int}


def test_a_fraction_in_the_token_or_extra_is_refused_naming_it(
    redis_client: redis.Redis, redis_url: str
) -> None:
    delivery = publish_one(redis_url, "token-fraction")

    async def script(client: httpx.AsyncClient) -> list[Any]:
        body = done_body((await client.get("/next")).json(), 5)
        sent = [
            await client.post("/done", json={**body, "token": body["token"] + 0.5}),
            await client.post("/done", json={**body, "extra": {"prompt_tokens": 100.5}}),
        ]
        return [(r.status_code, r.json()["field"]) for r in sent]

    assert with_api(redis_url, script) == [(422, "token"), (422, "extra")]
    assert delivery.read_results("token-fraction") == []

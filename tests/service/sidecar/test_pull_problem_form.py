"""A bad report to the sidecar's pull API reads as a bad ``/schedule`` does: its ``error`` is the
service's 422 ``detail`` (``field=value: what is wrong``, ``service.problems.details``), with the
problem's ``field``, ``value`` and ``errors[]`` beside it. It was ``field: message`` for every error,
``; ``-joined, without the value, a query field named ``query.wait_s`` where the service names
``wait_ms``, and an unknown finish quoted in the words (``finish_reason: 'eos' is not ...``) (user66).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import redis

from service.problems.details import validation_details
from service.sidecar.pull_bodies import DoneBody
from service.sidecar.pull_finish import UNKNOWN
from tests.service.sidecar.pullclient import done_body, publish_one, with_api


def test_a_bad_done_reads_as_the_service_s_422_and_names_its_value_once(
    redis_client: redis.Redis, redis_url: str
) -> None:
    publish_one(redis_url, "form-done")

    async def script(client: httpx.AsyncClient) -> list[Any]:
        body = done_body((await client.get("/next")).json(), 7)
        sent = [
            await client.post("/done", json={**body, "output_tokens": 5.5}),
            await client.post("/done", json={**body, "finish_reason": "eos"}),
            await client.post("/done", json={**body, "output_tokens": 16_001}),  # past the item's cap
        ]
        return [(r.status_code, r.json()) for r in sent]

    fraction, unknown, above = with_api(redis_url, script)
    assert fraction == (
        422,
        {
            "error": "output_tokens=5.5: expected an integer",
            "field": "output_tokens",
            "value": 5.5,
            "errors": [{"field": "output_tokens", "message": "expected an integer", "type": "value_error"}],
        },
    )
    assert unknown[1]["error"] == f"finish_reason='eos': {UNKNOWN}"
    assert (unknown[1]["field"], unknown[1]["value"]) == ("finish_reason", "eos")
    words = "must be <= the item's max_new_tokens=16000"
    assert above == (  # every 422 has its errors[] (docs/sidecar.md): the cap's had none (review67)
        422,
        {
            "error": f"output_tokens=16001: {words}",
            "field": "output_tokens",
            "value": 16001,
            "errors": [{"field": "output_tokens", "message": words, "type": "value_error"}],
        },
    )


def test_the_error_is_the_detail_the_service_renders_of_the_same_refusal(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """One renderer: the sidecar's ``error`` and members are ``validation_details`` of pydantic's errors."""
    publish_one(redis_url, "form-same")
    bad = {"schedule_id": "form-same", "key": "k", "token": "1", "output_tokens": 3, "colour": 1}

    async def script(client: httpx.AsyncClient) -> Any:
        return (await client.post("/done", json=bad)).json()

    try:
        DoneBody.model_validate(bad)
    except ValueError as error:
        detail, extra = validation_details(error.errors())  # type: ignore[attr-defined]
    assert with_api(redis_url, script) == {"error": detail, **extra}
    assert detail == "token='1': Input should be a valid integer (and 1 more)"


def test_a_bad_wait_names_the_query_field_as_the_service_does(redis_url: str) -> None:
    async def script(client: httpx.AsyncClient) -> Any:
        return (await client.get("/next", params={"wait_s": "soon"})).json()

    answer = with_api(redis_url, script)
    words = "Input should be a valid number, unable to parse string as a number"
    assert answer["error"] == f"wait_s='soon': {words}"
    assert (answer["field"], answer["value"]) == ("wait_s", "soon")


def test_a_nan_or_a_lone_surrogate_is_named_and_the_answer_still_renders(
    redis_client: redis.Redis, redis_url: str
) -> None:
    publish_one(redis_url, "form-render")

    async def script(client: httpx.AsyncClient) -> list[Any]:
        body = done_body((await client.get("/next")).json(), 7)
        as_json = {"Content-Type": "application/json"}
        nan = '{"wall_time_s": NaN, ' + json.dumps(body)[1:]
        lone = json.dumps({**body, "output": "\ud800"})
        sent = [await client.post("/done", content=text, headers=as_json) for text in (nan, lone)]
        return [(r.status_code, r.json()["error"], r.json().get("value")) for r in sent]

    nan, lone = with_api(redis_url, script)
    assert nan == (422, "wall_time_s=nan: Input should be a finite number", "nan")
    assert lone == (422, "output='\\ud800': a lone UTF-16 surrogate at character 0 is not text", "\ud800")

"""Every entry an output length comes in by refuses one of no token, in the same words, naming its field.

A generation is at least the token it ended on (an empty one is its EOS alone: engines and veRL's
response mask count it), so an output of 0 tokens is a miscount: a worker counting decoded text. The
trace format and ``POST /actuals`` refused it, the sidecar's ``POST /done`` and the delivery's
``complete`` stored it, and then no client reported it (learn54). One rule now
(``scheduler.trace.output_length``): a result that says a length (``stop``, ``length``) is at least
one token; one that says none (a worker's ``abort``) is not held to it, as before. A push sidecar's
engine answering 0 is ``test_engine_client_failures.py``'s: no one to refuse, it is read as 1.
Real Redis.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import redis
from fastapi.testclient import TestClient

from scheduler.errors import InvalidInputError
from scheduler.trace import TraceFormatError, parse_row
from service.delivery.outcomes import CompletionOutcome
from service.delivery.records import TrajectoryResult
from tests.service.api_helpers import actual_report
from tests.service.sidecar.pullclient import done_body, publish_one, with_api

WORDS = "must be >= 1: a generation is at least the token it ended on (an empty one is its EOS)"


def test_the_trace_format_refuses_it_at_its_column() -> None:
    with pytest.raises(TraceFormatError) as refused:
        parse_row({**actual_report(0, 1, 0), "output_tokens": 0}, "trace.jsonl", 3)
    assert (refused.value.column, refused.value.reason) == ("output_tokens", WORDS)


def test_the_api_refuses_it_naming_the_report_field(client: TestClient, redis_client: redis.Redis) -> None:
    response = client.post("/actuals", json={"actuals": [{**actual_report(0, 1, 0), "output_tokens": 0}]})
    assert response.status_code == 422
    assert response.json()["field"] == "actuals[0].output_tokens"
    assert response.json()["detail"] == f"actuals[0].output_tokens=0: {WORDS}"
    assert redis_client.exists("rs:actuals") == 0


def test_the_sidecars_done_refuses_it_where_it_says_a_length_and_keeps_the_lease(
    redis_client: redis.Redis, redis_url: str
) -> None:
    delivery = publish_one(redis_url, "no-token")

    async def script(client: httpx.AsyncClient) -> list[Any]:
        body = done_body((await client.get("/next")).json(), 0)
        refused = [
            await client.post("/done", json=body),  # finish_reason "stop" by default
            await client.post("/done", json={**body, "finish_reason": "length"}),
        ]
        held = len((await client.get("/leases")).json()["held"])
        aborted = await client.post("/done", json={**body, "finish_reason": "abort"})  # says no length
        return [*((r.status_code, r.json()["error"]) for r in refused), held, aborted.json()]

    assert with_api(redis_url, script) == [
        (422, f"output_tokens=0: {WORDS}"),
        (422, f"output_tokens=0: {WORDS}"),
        1,
        {"outcome": "accepted"},
    ]
    [stored] = delivery.read_results("no-token")
    assert (stored.result.output_tokens, stored.result.finish_reason) == (0, "abort")


def test_the_delivery_refuses_it_naming_the_result_and_stores_nothing(
    redis_client: redis.Redis, redis_url: str
) -> None:
    delivery = publish_one(redis_url, "no-token-lib")
    [lease] = delivery.claim("no-token-lib", "w0", 1)
    for finish in ("stop", "length"):
        with pytest.raises(InvalidInputError) as refused:
            delivery.complete(lease, TrajectoryResult(output_tokens=0, finish_reason=finish))
        assert (refused.value.field, refused.value.reason) == (f"results[{lease.key}].output_tokens", WORDS)
    assert delivery.read_results("no-token-lib") == []
    aborted = TrajectoryResult(output_tokens=0, finish_reason="abort")
    assert delivery.complete(lease, aborted) is CompletionOutcome.ACCEPTED

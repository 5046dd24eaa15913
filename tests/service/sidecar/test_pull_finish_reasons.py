"""A pull worker's ``/done`` says a ``finish_reason`` the service knows, an engine's word whose meaning
is certain, or is refused naming the field and what it takes, with its lease kept.

It took any text, and every reason but ``stop`` and ``length`` says no length: a worker passing its
engine's ``tool_calls`` through, or an ``eos`` or ``STOP`` of its own, had every result stored as no
actual, and the predictor never learned from it, silently (trace55). The engines' words:
vLLM's ``stop | length | abort | error | repetition``, its and SGLang's OpenAI servers' ``tool_calls``,
SGLang's ``{"type": "stop" | "length" | "abort", ...}`` object. Real Redis, through the pull API.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import redis

from service.api.progress_schemas import ResultEntry
from service.client.actuals import actual_from_result
from service.delivery.records import ResultRecord
from service.problems.details import ECHO_HEAD
from service.sidecar.pull_finish import UNKNOWN
from tests.service.sidecar.pullclient import done_body, publish_one, session_of, with_api


def _entry(record: ResultRecord) -> ResultEntry:
    """The stored result as the trainer's results page serves it."""
    result = record.result
    return ResultEntry(
        stream_id=record.stream_id,
        key=record.key,
        prompt_id=record.key.split("#")[0],
        sample_idx=int(record.key.split("#")[1]),
        worker_id=record.worker_id,
        attempt=record.attempt,
        output_tokens=result.output_tokens,
        finish_reason=result.finish_reason,
        wall_time_s=result.wall_time_s,
        output=result.output,
        reward=result.reward,
        extra=dict(result.extra),
    )


@pytest.mark.parametrize("word", ["eos", "STOP", "content_filter", "timeout"])
def test_an_unknown_finish_is_refused_naming_the_field_and_the_lease_stays_held_for_the_corrected_report(
    redis_client: redis.Redis, redis_url: str, word: str
) -> None:
    delivery = publish_one(redis_url, "unknown-finish")
    session = session_of(redis_url)

    async def script(client: httpx.AsyncClient) -> list[Any]:
        body = done_body((await client.get("/next")).json(), 7)
        refused = await client.post("/done", json={**body, "finish_reason": word})
        held = len((await client.get("/leases")).json()["held"])
        corrected = await client.post("/done", json={**body, "finish_reason": "stop"})
        again = await client.post("/done", json={**body, "finish_reason": "stop"})
        return [refused.status_code, refused.json()["error"], held, corrected.json(), again.json()]

    assert with_api(redis_url, script, session=session) == [
        422,
        f"finish_reason={word!r}: {UNKNOWN}",  # the reason once, in the lead (user66)
        1,
        {"outcome": "accepted"},
        {"outcome": "duplicate"},
    ]
    [stored] = delivery.read_results("unknown-finish")
    assert (stored.result.finish_reason, stored.result.output_tokens) == ("stop", 7)
    ends = ("accepted", "duplicate", "stale", "failed", "released", "lost")
    assert {name: getattr(session.stats, name) for name in ends if getattr(session.stats, name)} == {
        "accepted": 1  # the lease ended once, as accepted: the refusal and the repeat added nothing
    }


def test_an_engines_error_is_refused_as_a_failure_and_its_fail_is_still_taken(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """vLLM's ``error`` is a request that failed: no trajectory, so no result; ``/fail`` says so."""
    delivery = publish_one(redis_url, "error-finish")

    async def script(client: httpx.AsyncClient) -> list[Any]:
        body = done_body((await client.get("/next")).json(), 3)
        refused = await client.post("/done", json={**body, "finish_reason": "error"})
        lease = {name: body[name] for name in ("schedule_id", "key", "token")}
        failed = await client.post("/fail", json={**lease, "reason": "kv load failed"})
        return [refused.status_code, refused.json()["error"], failed.json()["outcome"]]

    assert with_api(redis_url, script) == [
        422,
        "finish_reason='error': a generation that failed, not one that finished: report it with POST /fail",
        "requeued",
    ]
    assert delivery.read_results("error-finish") == []


@pytest.mark.parametrize("word", ["tool_calls", "function_call", "repetition"])
def test_an_engines_word_for_a_generation_that_ended_by_itself_is_stored_as_stop_and_learned_from(
    redis_client: redis.Redis, redis_url: str, word: str
) -> None:
    """As the push mode reads it (``engine_reply.parse_reply``): ``stop``, the word kept in ``extra``."""
    delivery = publish_one(redis_url, "tool-finish")

    async def script(client: httpx.AsyncClient) -> Any:
        body = done_body((await client.get("/next")).json(), 42)
        return (await client.post("/done", json={**body, "finish_reason": word})).json()

    assert with_api(redis_url, script) == {"outcome": "accepted"}
    [stored] = delivery.read_results("tool-finish")
    assert (stored.result.finish_reason, stored.result.extra["engine_finish_reason"]) == ("stop", word)
    actual = actual_from_result(0, _entry(stored), {}, {})
    assert actual is not None
    assert (actual.finish_reason, actual.output_tokens) == ("stop", 42)


def test_a_workers_own_engine_finish_reason_in_extra_is_kept(
    redis_client: redis.Redis, redis_url: str
) -> None:
    delivery = publish_one(redis_url, "own-word")

    async def script(client: httpx.AsyncClient) -> Any:
        body = done_body((await client.get("/next")).json(), 42)
        sent = {**body, "finish_reason": "tool_calls", "extra": {"engine_finish_reason": "tool_calls:search"}}
        return (await client.post("/done", json=sent)).json()

    assert with_api(redis_url, script) == {"outcome": "accepted"}
    [stored] = delivery.read_results("own-word")
    assert stored.result.extra["engine_finish_reason"] == "tool_calls:search"


@pytest.mark.parametrize(
    ("finish", "tokens", "stored"),
    [
        ({"type": "stop", "matched": 151645}, 9, "stop"),
        ({"type": "length", "length": 10}, 10, "length"),
        ({"type": "abort", "message": "Abort before prefill"}, 0, "abort"),
    ],
)
def test_sglangs_finish_reason_object_is_read_as_its_type(
    redis_client: redis.Redis, redis_url: str, finish: dict[str, Any], tokens: int, stored: str
) -> None:
    """What ``Engine.generate`` answers in ``meta_info["finish_reason"]``, passed through as it is."""
    delivery = publish_one(redis_url, "sglang-finish")

    async def script(client: httpx.AsyncClient) -> Any:
        body = done_body((await client.get("/next")).json(), tokens)
        return (await client.post("/done", json={**body, "finish_reason": finish})).json()

    assert with_api(redis_url, script) == {"outcome": "accepted"}
    [record] = delivery.read_results("sglang-finish")
    assert (record.result.finish_reason, record.result.output_tokens) == (stored, tokens)
    assert "engine_finish_reason" not in record.result.extra


def test_an_object_of_another_type_is_refused_and_an_unknown_finish_at_zero_tokens_names_the_finish_alone(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """A 0 is judged only where the finish says a length: with a refused finish, one error, the finish's."""
    publish_one(redis_url, "odd-object")

    async def script(client: httpx.AsyncClient) -> list[Any]:
        body = done_body((await client.get("/next")).json(), 0)
        sent = [
            await client.post("/done", json={**body, "finish_reason": {"type": "eos"}}),
            await client.post("/done", json={**body, "finish_reason": "eos"}),
        ]
        held = len((await client.get("/leases")).json()["held"])
        said = [(r.status_code, r.json()["field"], r.json()["error"]) for r in sent]
        return [
            *((status, field == "finish_reason", "output_tokens" in error) for status, field, error in said),
            held,
        ]

    assert with_api(redis_url, script) == [(422, True, False), (422, True, False), 1]


@pytest.mark.parametrize(
    ("word", "shown"),
    [
        ("x" * 41, repr("x" * 41)),  # quoted whole, as the service's 422 names a text of 256 or fewer
        ("x" * 300, f"{'x' * ECHO_HEAD!r}... (300 characters)"),  # a whole decoded text: cut, start quoted
        ("eos\n", "'eos\\n'"),  # escaped as Python writes it: the answer's one line stays one line
        ("fin\u00e9", "'fin\u00e9'"),  # as sent (the answer's JSON escapes it)
    ],
)
def test_an_unknown_finish_is_named_once_as_the_service_names_a_value(
    redis_client: redis.Redis, redis_url: str, word: str, shown: str
) -> None:
    publish_one(redis_url, "quoted-finish")

    async def script(client: httpx.AsyncClient) -> Any:
        body = done_body((await client.get("/next")).json(), 7)
        return (await client.post("/done", json={**body, "finish_reason": word})).json()["error"]

    assert with_api(redis_url, script) == f"finish_reason={shown}: {UNKNOWN}"


def test_a_finish_with_a_lone_surrogate_is_refused_as_text_not_as_an_unknown_reason(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """The field's own words, as every text field of a report says them: the reason is the encoding."""
    publish_one(redis_url, "surrogate-finish")

    async def script(client: httpx.AsyncClient) -> Any:
        body = done_body((await client.get("/next")).json(), 7)
        as_json = {"Content-Type": "application/json"}  # json.dumps writes the surrogate as \ud800
        sent = json.dumps({**body, "finish_reason": "stop\ud800"})
        return (await client.post("/done", content=sent, headers=as_json)).json()["error"]

    assert with_api(redis_url, script) == (
        "finish_reason='stop\\ud800': a lone UTF-16 surrogate at character 4 is not text"
    )

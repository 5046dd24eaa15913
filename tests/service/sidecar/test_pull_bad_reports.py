"""A report the pull API cannot take (not finite, past the cap, the wrong shape, a form, nested too deep)
is refused naming what is wrong, and the lease stays held for the corrected report."""

from __future__ import annotations

import json
from typing import Any

import httpx
import redis

from tests.service.sidecar.pullclient import done_body, publish_one, with_api


def test_a_report_with_nan_or_above_the_cap_is_refused_and_the_lease_is_kept(
    redis_client: redis.Redis, redis_url: str
) -> None:
    delivery = publish_one(redis_url, "bad-done")

    async def script(client: httpx.AsyncClient) -> list[Any]:
        lease = (await client.get("/next")).json()
        body = done_body(lease, 5)
        as_json = {"Content-Type": "application/json"}  # what a worker's client sends with its JSON
        nan = await client.post(
            "/done", content=json.dumps({**body, "wall_time_s": float("inf")}), headers=as_json
        )
        nested = await client.post(
            "/done", content=json.dumps({**body, "extra": {"x": float("nan")}}), headers=as_json
        )
        wordy = await client.post("/done", json={**body, "extra": {"concurrency": "high"}})
        over = await client.post("/done", json={**body, "output_tokens": 16_001})  # the item's cap: 16,000
        held = len((await client.get("/leases")).json()["held"])
        good = await client.post("/done", json=body)
        return [
            (nan.status_code, nan.json()["error"]),
            nested.status_code,
            wordy.status_code,
            over.status_code,
            held,
            good.status_code,
        ]

    assert with_api(redis_url, script) == [
        (422, "wall_time_s=inf: Input should be a finite number"),  # led as the service's 422
        422,
        422,
        422,
        1,
        200,
    ]
    assert [r.result.output_tokens for r in delivery.read_results("bad-done")] == [5]


def test_a_report_of_the_wrong_shape_is_refused_naming_what_is_wrong_and_the_lease_is_kept(
    redis_client: redis.Redis, redis_url: str
) -> None:
    delivery = publish_one(redis_url, "shape")

    async def script(client: httpx.AsyncClient) -> list[Any]:
        body = done_body((await client.get("/next")).json(), 5)
        as_json = {"Content-Type": "application/json"}
        sent = [
            await client.post("/done", json={k: v for k, v in body.items() if k != "output_tokens"}),
            await client.post("/done", json={**body, "token": "abc"}),
            await client.post("/done", json=[body]),
            await client.post("/done", json={**body, "tokens": 5}),
            await client.post("/done", content='{"schedule_id": ', headers=as_json),
        ]
        held = len((await client.get("/leases")).json()["held"])
        return [*((r.status_code, r.json()["error"]) for r in sent), held]

    refused = with_api(redis_url, script)
    assert refused[:4] == [
        (422, "output_tokens: Field required"),
        (422, "token='abc': Input should be a valid integer"),  # strict: no string read as a number
        (422, "body: Input should be a valid dictionary or object to extract fields from"),
        (422, "tokens: Extra inputs are not permitted"),
    ]
    assert refused[4] == (422, "body: JSON decode error at character 16: Expecting value")
    assert refused[5] == 1
    assert delivery.progress("shape").done == 0


def test_a_report_sent_as_a_form_is_refused_saying_to_send_it_as_json(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """``curl -d '{...}'`` sends a form: "Input should be a valid dictionary" alone did not say that
    the JSON in it was never read as JSON (the service's own 422 says so)."""
    delivery = publish_one(redis_url, "form")

    async def script(client: httpx.AsyncClient) -> list[Any]:
        body = json.dumps(done_body((await client.get("/next")).json(), 5))
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        sent = [await client.post(path, content=body, headers=form) for path in ("/done", "/fail")]
        return [(r.status_code, r.json()["error"]) for r in sent]

    refused = "body: Input should be a valid dictionary or object to extract fields from"
    told = f"{refused}; send the body as JSON, with 'Content-Type: application/json'"
    assert with_api(redis_url, script) == [(422, told), (422, told)]
    assert delivery.progress("form").done == 0


def test_a_report_nested_too_deep_for_the_service_to_serve_is_refused_and_the_lease_kept(
    redis_client: redis.Redis, redis_url: str
) -> None:
    # stored, it failed every results page of the service holding it (500): the trainer never got past it
    delivery = publish_one(redis_url, "deep-done")
    deep: dict[str, Any] = {}
    for _ in range(300):
        deep = {"a": deep}

    async def script(client: httpx.AsyncClient) -> list[Any]:
        body = done_body((await client.get("/next")).json(), 5)
        refused = await client.post("/done", json={**body, "extra": deep})
        held = len((await client.get("/leases")).json()["held"])
        good = await client.post("/done", json={**body, "extra": {"tool_calls": [{"function": {"a": 1}}]}})
        return [(refused.status_code, refused.json()["error"]), held, good.status_code]

    assert with_api(redis_url, script) == [(422, "extra: nested deeper than 32 levels"), 1, 200]
    assert [r.result.output_tokens for r in delivery.read_results("deep-done")] == [5]


def test_text_with_a_lone_surrogate_is_refused_naming_its_field_and_the_lease_kept(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """JSON's ``"\\ud800"`` is no text UTF-8 can carry. Taken, a ``/done``'s output, finish reason or
    extra was stored and failed every results page of the service holding it (500: the trainer could
    not collect the step), and a ``/fail``'s reason, a key or a schedule id was a 500 of the sidecar."""
    delivery = publish_one(redis_url, "surrogate")
    lone = "\ud800"

    async def script(client: httpx.AsyncClient) -> list[Any]:
        body = done_body((await client.get("/next")).json(), 5)
        as_json = {"Content-Type": "application/json"}  # json.dumps writes the surrogate as \ud800
        bad_done = [
            {**body, "output": lone},
            {**body, "finish_reason": lone},
            {**body, "extra": {lone: 1}},
            {**body, "extra": {"reasoning": [lone]}},
            {**body, "key": lone},
            {**body, "schedule_id": lone},
        ]
        lease = {name: body[name] for name in ("schedule_id", "key", "token")}
        sent = [await client.post("/done", content=json.dumps(b), headers=as_json) for b in bad_done]
        failed = json.dumps({**lease, "reason": lone})
        sent.append(await client.post("/fail", content=failed, headers=as_json))
        held = len((await client.get("/leases")).json()["held"])
        good = await client.post("/done", json=body)
        return [*((r.status_code, r.json()["field"]) for r in sent), held, good.status_code]

    fields = ["output", "finish_reason", "extra", "extra", "key", "schedule_id", "reason"]
    assert with_api(redis_url, script) == [*((422, field) for field in fields), 1, 200]
    assert [r.result.output for r in delivery.read_results("surrogate")] == [""]


def test_a_bad_query_is_refused_without_telling_a_bodiless_get_to_send_its_body_as_json(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """The JSON hint is for a body sent as a form; ``GET /next?wait_s=31`` has no body, and was told
    to send one as JSON as if the long-poll bound were a content-type mistake."""

    async def script(client: httpx.AsyncClient) -> tuple[int, str]:
        refused = await client.get("/next", params={"wait_s": 31})
        return refused.status_code, refused.json()["error"]

    assert with_api(redis_url, script) == (422, "wait_s='31': Input should be less than or equal to 30")


def test_a_report_whose_extra_token_counts_are_no_token_counts_is_refused_and_the_lease_kept(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """A worker's ``extra.prompt_tokens`` and ``extra.max_new_tokens`` stand over the item's (the
    worker may know its templated prompt length) and become the step's actuals. Taken as ``"abc"``,
    -5, 2^40 or a cap below the output, they made the trainer's ``report_results`` raise for the
    whole step (nothing of it reported); 1.5 and true were reported as 1."""
    delivery = publish_one(redis_url, "counts")
    bad_extras: list[dict[str, Any]] = [
        {"prompt_tokens": "abc"},
        {"prompt_tokens": -5},
        {"prompt_tokens": 1.5},
        {"prompt_tokens": True},
        {"prompt_tokens": 2**40},
        {"max_new_tokens": 3},  # below the output_tokens (5) reported
        {"max_new_tokens": "8192"},
    ]

    async def script(client: httpx.AsyncClient) -> list[Any]:
        body = done_body((await client.get("/next")).json(), 5)
        sent = [await client.post("/done", json={**body, "extra": extra}) for extra in bad_extras]
        held = len((await client.get("/leases")).json()["held"])
        good = await client.post("/done", json={**body, "extra": {"prompt_tokens": 12}})
        return [*((r.status_code, r.json()["error"].split(":")[0]) for r in sent), held, good.status_code]

    assert with_api(redis_url, script) == [*((422, "extra") for _ in bad_extras), 1, 200]
    (stored,) = delivery.read_results("counts")
    assert (stored.result.extra["prompt_tokens"], stored.result.extra["max_new_tokens"]) == (12, 16_000)


def test_a_report_in_utf16_or_utf32_is_refused_naming_the_body_and_nothing_is_stored(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """FastAPI's JSON decoder reads UTF-16 and UTF-32 too: such a ``/done`` was stored as if sent in
    UTF-8, where the service refuses the same body with a 400 naming ``body``; now the pull API does."""
    delivery = publish_one(redis_url, "utf16")

    async def script(client: httpx.AsyncClient) -> list[Any]:
        body = done_body((await client.get("/next")).json(), 5)
        as_json = {"Content-Type": "application/json"}
        failed = {**{k: body[k] for k in ("schedule_id", "key", "token")}, "reason": "engine died"}
        sent = [
            await client.post("/done", content=json.dumps(body).encode("utf-16"), headers=as_json),
            await client.post("/fail", content=json.dumps(failed).encode("utf-32-le"), headers=as_json),
        ]
        held = len((await client.get("/leases")).json()["held"])
        good = await client.post("/done", json=body)
        return [*((r.status_code, r.json()["error"]) for r in sent), held, good.status_code]

    refused = with_api(redis_url, script)
    assert refused[:2] == [
        (400, "body: the body is UTF-16 (it starts with a UTF-16 byte-order mark, FF FE), not UTF-8"),
        (400, "body: the body is UTF-32-LE (by the NUL bytes of its first characters), not UTF-8"),
    ]
    assert refused[2:] == [1, 200]  # the lease was kept for the report in UTF-8, which was taken
    assert [r.result.output_tokens for r in delivery.read_results("utf16")] == [5]


def test_a_report_sent_with_a_content_coding_is_a_415_and_the_lease_is_kept(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """The pull API reads bodies as sent, as the service does: a ``/done`` labelled ``gzip`` is
    refused unread (it was a 400 "not UTF-8" for a gzipped one, and a plain one was taken)."""
    delivery = publish_one(redis_url, "coded")

    async def script(client: httpx.AsyncClient) -> list[Any]:
        body = done_body((await client.get("/next")).json(), 5)
        coded = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
        refused = await client.post("/done", content=json.dumps(body).encode(), headers=coded)
        held = len((await client.get("/leases")).json()["held"])
        return [refused.status_code, refused.json()["error"].split(":")[:2], held]

    assert with_api(redis_url, script) == [415, ["Content-Encoding", " gzip is not read"], 1]
    assert delivery.read_results("coded") == []

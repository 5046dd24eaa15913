"""Stored bytes that are not UTF-8 (another client's write, a truncated one, an older release's) never
fail a read that can answer without them: an optional field reads as absent, logged once naming its
key and field. Written here with a client that sends bytes as they are, as such a writer would."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any, cast

import pytest
import redis
from fastapi.testclient import TestClient

from service.delivery import Delivery
from service.delivery.keys import ENGINE, PLANNED_FINISH, PREDICTED_MAKESPAN, PUBLISHED_AT, schedule_keys
from tests.service.api_helpers import actual_report, batch_body
from tests.service.finished import finished_with

NOT_UTF8 = b"\xff\xfe"  # no UTF-8 text holds either byte
OPTIONAL_META = {
    ENGINE: b"vl" + NOT_UTF8 + b"m",
    PLANNED_FINISH: b'{"w0": 1.0, "' + NOT_UTF8 + b'": 2.0}',
    PREDICTED_MAKESPAN: b"4." + NOT_UTF8,
    PUBLISHED_AT: b"17" + NOT_UTF8,
}


@pytest.fixture
def raw_client(redis_url: str, redis_client: redis.Redis) -> Iterator[redis.Redis]:
    """A client that writes and reads bytes as they are (on the flushed database ``redis_client`` made)."""
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.mark.parametrize("field", sorted(OPTIONAL_META))
def test_an_optional_meta_field_that_is_not_utf8_reads_as_absent_and_progress_answers_200(
    field: str, client: TestClient, raw_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    sid = client.post("/schedule", json=batch_body()).json()["schedule_id"]
    meta = schedule_keys(sid).meta
    raw_client.hset(meta, field, OPTIONAL_META[field])
    with caplog.at_level(logging.WARNING, logger="service.delivery.stored"):
        first, second = client.get(f"/schedule/{sid}"), client.get(f"/schedule/{sid}")
    assert (first.status_code, second.status_code) == (200, 200), first.text
    progress = first.json()
    assert (progress["total"], progress["queued"]) == (32, 32)  # the counts are all there
    absent = {
        ENGINE: progress["engine"],
        PLANNED_FINISH: {w["planned_finish_s"] for w in progress["workers"].values()} - {None} or None,
        PREDICTED_MAKESPAN: progress["predicted_makespan_s"],
        PUBLISHED_AT: progress["published_at_ms"],
    }
    assert absent[field] is None
    assert all(value is not None for name, value in absent.items() if name != field)
    warnings = [r.getMessage() for r in caplog.records if r.name == "service.delivery.stored"]
    assert len(warnings) == 1, warnings  # once, not on every poll
    assert meta in warnings[0]
    assert field in warnings[0]


def _completed(client: TestClient, redis_client: redis.Redis, outputs: list[str]) -> str:
    """A schedule whose items were completed with ``outputs``, one each, in order."""
    body = batch_body(prompts=1, n=len(outputs), workers=1)
    sid = str(client.post("/schedule", json=body).json()["schedule_id"])
    delivery = Delivery(redis_client)
    for lease, output in zip(delivery.claim(sid, "w0", max_items=10), outputs, strict=True):
        delivery.complete(lease, finished_with(output=output))
    return sid


def _rewritten(raw_client: redis.Redis, stream: str, field: bytes, old: bytes, new: bytes) -> None:
    """Append a copy of the stream's first entry with ``old`` replaced by ``new`` in its ``field``."""
    entries = cast(list[tuple[bytes, dict[Any, bytes]]], raw_client.xrange(stream, count=1))
    entry = entries[0][1]
    raw_client.xadd(stream, {**entry, field: entry[field].replace(old, new)})


@pytest.mark.parametrize(("field", "old"), [(b"result", b"first"), (b"worker", b"w0"), (b"key", b"p0#0")])
def test_a_result_holding_bytes_that_are_not_utf8_is_served_mended_and_paging_moves_past_it(
    field: bytes, old: bytes, client: TestClient, redis_client: redis.Redis, raw_client: redis.Redis
) -> None:
    sid = _completed(client, redis_client, ["first"])
    _rewritten(raw_client, schedule_keys(sid).results, field, old, old[:1] + NOT_UTF8)
    response = client.get(f"/schedule/{sid}/results")
    assert response.status_code == 200, response.text
    first, foreign = response.json()["results"]
    served = {b"result": foreign["output"], b"worker": foreign["worker_id"], b"key": foreign["key"]}
    assert served[field] == old.decode()[:1] + "\ufffd\ufffd"  # each byte as U+FFFD, the rest as stored
    assert first["output"] == "first"
    assert response.json()["next"] == foreign["stream_id"]


def test_an_actuals_entry_that_is_not_utf8_is_skipped_and_the_history_still_serves(
    client: TestClient, raw_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    assert client.post("/schedule", json=batch_body()).status_code == 200
    assert client.post("/actuals", json={"actuals": [actual_report(1, 0, 0)]}).status_code == 200
    _rewritten(raw_client, "rs:actuals", b"a", b'"p0"', b'"p' + NOT_UTF8 + b'"')
    with caplog.at_level(logging.WARNING, logger="service.actuals"):
        models = client.get("/models")
    assert models.status_code == 200, models.text
    assert models.json()["history_rows"] == 1  # the report stored through the API alone
    assert any("not UTF-8" in r.getMessage() for r in caplog.records)
    plan = client.post("/schedule", json=batch_body(publish=False))
    assert plan.status_code == 200, plan.text


def test_a_worker_profile_that_is_not_utf8_stores_the_reports_and_answers_200(
    client: TestClient, redis_client: redis.Redis, raw_client: redis.Redis
) -> None:
    assert client.post("/schedule", json=batch_body()).status_code == 200
    profile = cast(bytes, raw_client.hget("rs:workers", "w0"))
    raw_client.hset("rs:workers", "w0", profile.replace(b'"model"', b'"mo' + NOT_UTF8 + b'"'))
    response = client.post("/actuals", json={"actuals": [actual_report(1, 0, 0)]})
    assert response.status_code == 200, response.text
    assert (response.json()["accepted"], response.json()["time_scales"]) == (1, {})  # no profile: no speed


def test_a_retry_whose_stored_answer_is_not_utf8_is_the_409_of_an_unreadable_answer(
    client: TestClient, raw_client: redis.Redis
) -> None:
    body = batch_body(schedule_id="retried-step")
    assert client.post("/schedule", json=body).status_code == 200
    answer_key = schedule_keys("retried-step").answer
    stored = cast(bytes, raw_client.get(answer_key))
    raw_client.set(answer_key, stored[:10] + NOT_UTF8 + stored[12:])
    retry = client.post("/schedule", json=body)
    assert retry.status_code == 409, retry.text
    assert retry.json()["field"] == "schedule_id"


def test_reports_of_a_step_whose_stored_engine_is_not_utf8_are_stored_and_answered_200(
    client: TestClient, raw_client: redis.Redis
) -> None:
    sid = client.post("/schedule", json=batch_body()).json()["schedule_id"]
    raw_client.hset(schedule_keys(sid).meta, ENGINE, OPTIONAL_META[ENGINE])  # the speed learner reads it too
    report = {**actual_report(1, 0, 0), "schedule_id": sid}
    response = client.post("/actuals", json={"actuals": [report]})
    assert response.status_code == 200, response.text
    assert response.json()["accepted"] == 1


def _key_rewritten(raw_client: redis.Redis, sid: str, old: bytes, new: bytes) -> None:
    """Store queued item ``old`` of w0 under key ``new`` instead, wherever the publish wrote its key."""
    keys = schedule_keys(sid)
    for name in (keys.st, keys.items, keys.due):
        value = cast(bytes, raw_client.hget(name, old))
        raw_client.hdel(name, old)
        raw_client.hset(name, new, value.replace(b'"key":"' + old + b'"', b'"key":"' + new + b'"'))
    assert raw_client.lpop(keys.queue("w0")) == old
    raw_client.lpush(keys.queue("w0"), new)


def test_a_dead_letter_whose_key_is_not_utf8_is_served_mended_and_progress_answers_200(
    client: TestClient, redis_url: str, raw_client: redis.Redis
) -> None:
    """Such an item is failed at each claim (the sidecar cannot send it) until it is dead-lettered,
    and the dead letter holds its key's bytes as stored: rendered as they were read, every poll of
    the step answered 500 from then on, the trainer's wait for the step included."""
    sid = client.post("/schedule", json=batch_body(prompts=1, n=1, workers=1)).json()["schedule_id"]
    _key_rewritten(raw_client, sid, b"p0#0", b"p0" + NOT_UTF8 + b"#0")
    delivery = Delivery.from_url(redis_url)  # the service's decoding: that key reads as lone surrogates
    while not delivery.progress(sid).dead_letters:
        (lease,) = delivery.claim(sid, "w0", max_items=1)
        delivery.fail(lease, "its stored item is not UTF-8")
    response = client.get(f"/schedule/{sid}")
    assert response.status_code == 200, response.text
    progress = response.json()
    assert progress["dead_letter"] == ["p0\ufffd\ufffd#0"]  # each byte as U+FFFD, the rest as stored
    (dead,) = progress["dead_letters"]
    assert (dead["key"], dead["worker_id"], dead["attempts"]) == ("p0\ufffd\ufffd#0", "w0", 3)

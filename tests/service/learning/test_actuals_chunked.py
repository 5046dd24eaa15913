"""Actuals batches larger than a chunk: stored once, in order, trimmed exactly, never holding Redis
for more than ``CHUNK`` reports in one script call."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from typing import Any, cast

import pytest
import redis
from fastapi.testclient import TestClient

from service.api.learning_schemas import ActualReport
from service.delivery import keys
from service.learning.actuals import CHUNK, ActualsLog, report_digest, report_digests
from tests.service.api_helpers import AppFactory, actual_report
from tests.service.delivery.proxy import ReplyLosingProxy

SCRIPT_ARGS = 6  # EVALSHA, sha, numkeys, stream, seen, maxlen: the rest are 3 per report
PER_REPORT = 3  # its digest, its older release's digest ("" when the same) and its JSON


def _batch(reports: int) -> list[dict[str, Any]]:
    """``reports`` distinct reports (8 prompts x 16 samples a step), in a known order."""
    return [actual_report(i // 128, i // 16 % 8, i % 16) for i in range(reports)]


def _entries(redis_client: redis.Redis) -> list[str]:
    """The report JSON of every entry the stream holds, oldest first."""
    entries = cast(list[tuple[str, dict[str, str]]], redis_client.xrange("rs:actuals"))
    return [fields["a"] for _, fields in entries]


def _stored(redis_client: redis.Redis) -> list[tuple[int, str, int]]:
    """(step, prompt_id, sample_idx) of every entry the stream holds, oldest first."""
    docs = [json.loads(entry) for entry in _entries(redis_client)]
    return [(doc["step"], doc["prompt_id"], doc["sample_idx"]) for doc in docs]


def _keys(reports: list[dict[str, Any]]) -> list[tuple[int, str, int]]:
    return [(r["step"], r["prompt_id"], r["sample_idx"]) for r in reports]


@pytest.fixture
def slowlog(redis_client: redis.Redis) -> Iterator[redis.Redis]:
    """Every command the server runs logged, from an empty log; the server's settings restored after."""
    before = cast(dict[str, str], redis_client.config_get("slowlog-*"))
    redis_client.config_set("slowlog-log-slower-than", 0)
    redis_client.config_set("slowlog-max-len", 100_000)
    redis_client.slowlog_reset()
    yield redis_client
    for name, value in before.items():
        redis_client.config_set(name, value)


def _reports_per_script_call(redis_client: redis.Redis) -> list[int]:
    """Reports each append script call carried, read back from SLOWLOG (which keeps 31 arguments of
    a call and counts the rest as ``... (N more arguments)``). Other scripts are left out: a
    reaper pass that ran meanwhile read as a call of 0 reports."""
    counts = []
    for entry in redis_client.slowlog_get(100_000):
        command = entry["command"]
        line = command.decode() if isinstance(command, bytes) else str(command)
        parts = line.split(" ")
        # the append script's calls only: the background reaper's scripts run meanwhile too
        if line.upper().startswith("EVALSHA") and parts[3:4] == [keys.actuals_stream()]:
            more = re.search(r"\((\d+) more arguments\)", line)
            args = 31 + int(more.group(1)) if more else len(parts)
            counts.append((args - SCRIPT_ARGS) // PER_REPORT)
    return counts


def test_a_batch_larger_than_a_chunk_is_stored_once_in_order_with_its_counts(
    client: TestClient, redis_client: redis.Redis
) -> None:
    reports = _batch(2 * CHUNK + CHUNK // 2)
    answer = client.post("/actuals", json={"actuals": reports}).json()
    assert (answer["accepted"], answer["repeated"]) == (len(reports), 0)
    assert answer["stream_length"] == len(reports)
    assert _stored(redis_client) == _keys(reports)
    again = client.post("/actuals", json={"actuals": reports}).json()  # a retry of the same body
    assert (again["accepted"], again["repeated"], again["stream_length"]) == (0, len(reports), len(reports))
    assert client.get("/models").json()["history_rows"] == len(reports)


def test_no_script_call_holds_redis_for_more_than_a_chunk_of_reports(
    client: TestClient, slowlog: redis.Redis
) -> None:
    # one call over 100,000 reports held the server ~1 s: every sidecar's claim and heartbeat waited
    reports = _batch(2 * CHUNK + CHUNK // 2)
    client.post("/actuals", json={"actuals": reports[:1]})  # the script loaded (no NOSCRIPT retry)
    slowlog.slowlog_reset()
    assert client.post("/actuals", json={"actuals": reports}).json()["accepted"] == len(reports) - 1
    calls = _reports_per_script_call(slowlog)
    assert calls == [CHUNK // 2, CHUNK, CHUNK]  # newest first: the batch, in chunks, nothing more


def test_a_report_repeated_in_a_later_chunk_is_stored_once(
    client: TestClient, redis_client: redis.Redis
) -> None:
    reports = _batch(CHUNK + CHUNK // 2)
    batch = [*reports[:CHUNK], reports[3], *reports[CHUNK:]]  # report 3 again, in the second chunk
    answer = client.post("/actuals", json={"actuals": batch}).json()
    assert (answer["accepted"], answer["repeated"]) == (len(reports), 1)
    assert answer["stream_length"] == len(reports)
    assert _stored(redis_client) == _keys(reports)


def test_the_record_of_stored_reports_matches_the_stream_across_chunk_boundaries(
    make_client: AppFactory, redis_client: redis.Redis
) -> None:
    maxlen = CHUNK + CHUNK // 2  # the stream trims inside the second and third chunks
    client = make_client(actuals_maxlen=maxlen)
    reports = _batch(3 * CHUNK)
    assert client.post("/actuals", json={"actuals": reports}).json()["accepted"] == len(reports)
    held = [report_digest(ActualReport.model_validate_json(entry)) for entry in _entries(redis_client)]
    added = int(redis_client.xinfo_stream("rs:actuals")["entries-added"])
    seen = redis_client.zrange(keys.actuals_seen(), 0, -1, withscores=True)
    assert maxlen <= len(held) < len(reports)  # trimmed, approximately (whole nodes)
    # exactly one digest per entry held, scored with that entry's ordinal
    assert seen == [(digest, float(added - len(held) + 1 + i)) for i, digest in enumerate(held)]
    newest = reports[-len(held) :]
    again = client.post("/actuals", json={"actuals": newest}).json()
    assert (again["accepted"], again["repeated"]) == (0, len(newest))


def test_a_batch_cut_off_part_way_stores_a_prefix_and_its_retry_stores_the_rest_once(
    redis_client: redis.Redis,
) -> None:
    reports = [ActualReport.model_validate(r) for r in _batch(2 * CHUNK + CHUNK // 2)]
    ActualsLog(redis_client, maxlen=10**6).append(reports[:1])  # the script loaded, then forgotten
    redis_client.flushdb()
    proxy = ReplyLosingProxy(int(redis_client.connection_pool.connection_kwargs["port"]))
    lossy = redis.Redis.from_url(proxy.url, decode_responses=True, retry=None)
    try:
        lossy.ping()  # connected, so the next replies are the chunks'
        proxy.lose_next_reply(after=1)  # the first chunk answers; the second runs, its reply lost
        with pytest.raises(redis.ConnectionError):
            ActualsLog(lossy, maxlen=10**6).append(reports)
    finally:
        proxy.close()
        lossy.close()
    assert redis_client.xlen("rs:actuals") == 2 * CHUNK  # a prefix of whole chunks, the third never ran
    retried = ActualsLog(redis_client, maxlen=10**6).append(reports)
    assert (len(retried.stored), retried.repeated, retried.length) == (CHUNK // 2, 2 * CHUNK, len(reports))
    assert retried.stored == reports[2 * CHUNK :]
    assert _stored(redis_client) == [(r.step, r.prompt_id, r.sample_idx) for r in reports]


@pytest.mark.parametrize(
    "features",
    [{}, {"step": 3.0}, {"a": ',"step":1', "step": "x", "z": 1.0}, {"schedule_id": "s", "w": '"step"'}],
)
def test_the_older_digest_of_a_report_naming_its_schedule_is_the_one_older_releases_recorded(
    features: dict[str, Any],
) -> None:
    # spliced from the newer digest's text (service/learning/actuals.py): it must match a digest of every
    # field, whatever the features are named or hold, or a retry across a roll is stored twice; set
    # past the validation, which refuses a feature named ``step`` since api60 (the digest never relied on it)
    valid = ActualReport.model_validate(dict(actual_report(2, 1, 0), schedule_id="run-7.step:2"))
    report = valid.model_copy(update={"features": features})
    every_field = json.dumps(
        report.model_dump(mode="json", exclude_none=True), sort_keys=True, separators=(",", ":")
    )
    newer, older = report_digests(report)
    assert older == hashlib.blake2b(every_field.encode(), digest_size=16).hexdigest() != newer
    bare = report.model_copy(update={"schedule_id": None})
    assert report_digests(bare) == (newer, "")  # no schedule id: one digest, as older releases had

"""The actuals entries a read skips are said once per entry as they arrive, and in one line at a start.

An entry that does not read stays in the stream until it is trimmed or deleted by hand, and every
replica's start reads the whole stream: each start warned once per old entry, the same lines every
time, which hid a new one among them. Now a read of the whole stream (a start, or the history
reloaded after Redis lost it) says what it skipped in one line, naming the first
``SKIPPED_NAMED`` entries, and a read of what is new (a sync, the follower's tick) says each entry it
skips on a line of its own, as before. Real Redis.
"""

from __future__ import annotations

import json
import logging

import pytest
import redis

from service.api.learning_schemas import ActualReport
from service.learning import actuals
from service.learning.actuals import SKIPPED_NAMED, ActualsLog
from tests.service.api_helpers import AppFactory, actual_report

FOREIGN = json.dumps({"step": 0, "prompt_id": "p9", "sample_idx": 0, "prompt_tokens": 10, "output_tokens": 5})
ABORTED = json.dumps({**json.loads(FOREIGN), "finish_reason": "abort"})  # the trace table holds no "abort"


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    lines = [r.getMessage() for r in caplog.records if r.name == "service.actuals"]
    caplog.clear()
    return lines


def test_each_start_says_the_old_entries_in_one_line_and_a_sync_says_each_new_one(
    make_client: AppFactory, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    old = [redis_client.xadd("rs:actuals", {"a": ABORTED}) for _ in range(3)]  # a foreign writer's, long ago
    caplog.set_level(logging.WARNING, logger="service.actuals")
    for _ in range(2):  # a replica's start, then another's (or the same one's, restarted)
        client = make_client(actuals_follow_s=0)  # no follower: this replica reads when asked, below
        [line] = _said(caplog)
        assert line.startswith("skipping 3 unreadable actuals entries the stream holds: ")
        assert all(str(entry) in line for entry in old)
    new = str(redis_client.xadd("rs:actuals", {"a": ABORTED}))  # one arriving while the replica runs
    assert client.post("/actuals", json={"actuals": [actual_report(1, 0, 0)]}).status_code == 200
    assert client.get("/models").json()["history_rows"] == 1
    why = "finish_reason is neither none nor one of ('stop', 'length')"
    assert _said(caplog) == [f"skipping unreadable actuals entry {new}: {why}"]


def test_a_whole_read_names_the_first_entries_it_skipped_and_counts_the_rest(
    redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    log = ActualsLog(redis_client, maxlen=10**6)
    skipped = [redis_client.xadd(log.key, {"a": "not json"}) for _ in range(SKIPPED_NAMED + 3)]
    log.append([ActualReport.model_validate(actual_report(0, 0, 0))])
    counted: list[int] = []
    log.skipped = counted.append
    with caplog.at_level(logging.WARNING, logger="service.actuals"):
        read = log.rows_after(actuals.START)
    assert len(read.rows) == 1
    [line] = _said(caplog)
    named = ", ".join(str(entry) for entry in skipped[:SKIPPED_NAMED])
    assert line.startswith(
        f"skipping {len(skipped)} unreadable actuals entries the stream holds: {named} and 3 more"
    )
    assert counted == [len(skipped)]  # the metric counts every one, named or not

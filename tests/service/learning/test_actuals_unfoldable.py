"""An actuals entry the trace table cannot hold is skipped, on every read path, and never fails a sync.

The API never stores one (``POST /actuals`` refuses each, 422, naming the field): it comes from
something else writing the stream, a trainer's own tool XADDing its engine's reports (vLLM's finish
reason ``abort``), a hand-made fix-up, another release. Before (poison51, found by mutants14) such an
entry passed the stream reader's row check and then raised out of ``Trace.from_rows``: every later
sync failed, and every replica's start, until someone deleted it by hand.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from predictors.store import ModelStore
from service.api.learning_schemas import ActualReport
from service.learning import actuals
from service.learning.actuals import ActualsLog
from service.learning.actuals_entry import row_or_none
from service.learning.actuals_page import page_trace
from service.learning.follower import Follower
from service.learning.models import ModelService
from service.learning.shared_texts import SharedTexts
from tests.service.api_helpers import AppFactory, actual_report

FOREIGN = {"step": 0, "prompt_id": "p9", "sample_idx": 0, "prompt_tokens": 10, "output_tokens": 5}
# Each was kept by the row check and then raised out of ``Trace.from_rows`` (the last three out of
# ``row_or_none`` itself, uncaught).
UNFOLDABLE = {
    "finish-abort": json.dumps({**FOREIGN, "finish_reason": "abort"}),
    "finish-a-number": json.dumps({**FOREIGN, "finish_reason": 1}),
    "features-a-list": json.dumps({**FOREIGN, "features": [1.0]}),
    "features-null": json.dumps({**FOREIGN, "features": None}),
    "feature-null": json.dumps({**FOREIGN, "features": {"x": None}}),
    "feature-a-list": json.dumps({**FOREIGN, "features": {"x": [1]}}),
    "feature-past-a-float": json.dumps({**FOREIGN, "features": {"x": 10**400}}),
    "reward-text": json.dumps({**FOREIGN, "reward": "high"}),
    "reward-an-object": json.dumps({**FOREIGN, "reward": {"v": 1}}),
    "reward-past-a-float": json.dumps({**FOREIGN, "reward": 10**400}),
    "not-an-object": json.dumps([FOREIGN]),
    "a-string": json.dumps("report"),
    "nested-too-deep": "[" * 100_000 + "]" * 100_000,
}
REPORTS = [actual_report(0, p, i) for p in range(4) for i in range(4)]


def _models(client: TestClient) -> ModelService:
    models: ModelService = client.app.state.context.models  # type: ignore[attr-defined]
    return models


@pytest.mark.parametrize("raw", UNFOLDABLE.values(), ids=UNFOLDABLE.keys())
def test_a_read_skips_the_entry_says_which_and_keeps_every_report_beside_it(
    raw: str, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    log = ActualsLog(redis_client, maxlen=10**6)
    log.append([ActualReport.model_validate(r) for r in REPORTS[:8]])
    bad = redis_client.xadd(log.key, {"a": raw})
    log.append([ActualReport.model_validate(r) for r in REPORTS[8:]])
    with caplog.at_level(logging.WARNING, logger="service.actuals"):
        read = log.rows_after(actuals.START)
    assert len(read.rows) == len(REPORTS)
    said = [r.getMessage() for r in caplog.records if "unreadable actuals entr" in r.getMessage()]
    assert len(said) == 1
    assert str(bad) in said[0]  # the entry's id: found, and deleted, by hand


@pytest.mark.parametrize("raw", UNFOLDABLE.values(), ids=UNFOLDABLE.keys())
def test_a_page_holding_the_entry_is_left_to_the_entry_by_entry_read(raw: str) -> None:
    assert page_trace([json.dumps(FOREIGN), raw, json.dumps(FOREIGN)], SharedTexts()) is None


@pytest.mark.parametrize(
    "feature", [True, None, [1.0], {"v": 1.0}], ids=["true", "null", "a-list", "an-object"]
)
def test_the_page_keeps_no_feature_value_the_entry_by_entry_read_skips(feature: object) -> None:
    """A ``true`` feature was read as 1.0 by the page; the entry-by-entry read now skips it, so the
    page leaves it to that read, and a page reads to the same rows either way."""
    raw = json.dumps({**FOREIGN, "features": {"x": feature}})
    assert row_or_none(raw, SharedTexts()) is None
    assert page_trace([raw], SharedTexts()) is None


@pytest.mark.parametrize("raw", UNFOLDABLE.values(), ids=UNFOLDABLE.keys())
def test_a_replica_starts_and_every_later_sync_folds_past_the_entry(
    raw: str, make_client: AppFactory, redis_client: redis.Redis
) -> None:
    redis_client.xadd("rs:actuals", {"a": raw})  # there before the replica starts
    client = make_client()  # its start reads the whole stream
    assert client.post("/actuals", json={"actuals": REPORTS}).status_code == 200
    assert client.get("/models").json()["history_rows"] == len(REPORTS)
    redis_client.xadd("rs:actuals", {"a": raw})  # and one arriving between two syncs
    more = [actual_report(1, p, 0) for p in range(4)]
    assert client.post("/actuals", json={"actuals": more}).status_code == 200
    assert client.get("/models").json()["history_rows"] == len(REPORTS) + len(more)


@pytest.mark.parametrize("raw", UNFOLDABLE.values(), ids=UNFOLDABLE.keys())
def test_the_follower_folds_past_the_entry(
    raw: str, redis_client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = ActualsLog(redis_client, maxlen=10**6)
    models = ModelService(ModelStore(tmp_path / "models"), log)
    monkeypatch.setattr(models, "warm_later", lambda step: None)
    follower = Follower(models, every_s=1.0)  # its ticks, not its thread: ``follow_once`` is one
    log.append([ActualReport.model_validate(r) for r in REPORTS[:8]])
    assert follower.follow_once() == 8
    redis_client.xadd(log.key, {"a": raw})
    log.append([ActualReport.model_validate(r) for r in REPORTS[8:]])
    assert follower.follow_once() == len(REPORTS) - 8  # it failed here, and at every tick after
    assert models.rows == len(REPORTS)


UNSTORED = [
    ("finish_reason", "abort"),
    ("finish_reason", None),
    ("features", [1.0]),
    ("features", {"x": None}),
    ("features", {"x": [1]}),
    ("reward", "high"),
    ("reward", True),
    ("reward", 10**400),
]


@pytest.mark.parametrize(("field", "value"), UNSTORED, ids=[f"{f}-{v!r:.12}" for f, v in UNSTORED])
def test_the_api_refuses_each_naming_the_field_and_stores_nothing(
    field: str, value: Any, client: TestClient, redis_client: redis.Redis
) -> None:
    report = {**actual_report(0, 1, 0), field: value}
    body = json.dumps({"actuals": [report]})  # json: a 400-digit reward, as a client may send it
    response = client.post("/actuals", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 422
    assert response.json()["field"].startswith(f"actuals[0].{field}")
    assert redis_client.exists("rs:actuals") == 0


def _skipped(client: TestClient) -> float:
    [value] = re.findall(r"^rollout_actuals_skipped_total (\S+)$", client.get("/metrics").text, re.M)
    return float(value)


def test_each_skipped_entry_is_counted_once_per_read_for_an_operators_alert(
    make_client: AppFactory, redis_client: redis.Redis
) -> None:
    redis_client.xadd("rs:actuals", {"a": UNFOLDABLE["finish-abort"]})
    client = make_client()
    assert _skipped(client) == 1.0  # the start read the whole stream
    assert client.post("/actuals", json={"actuals": REPORTS}).status_code == 200
    assert client.get("/models").json()["history_rows"] == len(REPORTS)
    assert _skipped(client) == 1.0  # a sync reads only what is new
    redis_client.xadd("rs:actuals", {"a": UNFOLDABLE["reward-text"]})
    redis_client.xadd("rs:actuals", {"a": "not json"})
    assert client.post("/actuals", json={"actuals": [actual_report(1, 0, 0)]}).status_code == 200
    assert client.get("/models").json()["history_rows"] == len(REPORTS) + 1
    assert _skipped(client) == 3.0

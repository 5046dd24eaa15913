"""Stored reports whose features carry a name the API now refuses are read back without those features.

Releases before 2026-12-07 took a report's feature named as a trace column (``output_tokens``,
``step``...) or by another tool's name for one (``max_tokens``, vLLM's ``completion_tokens``), and
the actuals stream keeps a report until its cap trims it. Read back, every replica's history held
such a feature and every retrain fitted it: a model of features no request can send any more (a
``POST /schedule`` item's ``max_tokens`` is refused, 422), the very length it predicts among them as
``completion_tokens``. Now the read leaves those features out (``predictors.featurenames``, the rule
the API refuses them by), keeps every row and every other feature, and says so in one line naming
them and how many rows held them. Real Redis.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import redis

from predictors.featurenames import TRACE_COLUMNS, refused
from predictors.headerhints import ALIASES
from service.api.feature_names import refusal
from service.api.learning_schemas import ActualReport
from service.learning import actuals
from service.learning.actuals import ActualsLog
from tests.service.api_helpers import AppFactory, actual_history, actual_report

# what an older release stored of a report sent with these features; ``Output_Tokens`` (another
# case) and ``x`` stay features
OLD = {"max_tokens": 512, "completion_tokens": 300, "prompt_id": "a text", "x": 1.5, "Output_Tokens": 3}
LEFT_OUT = ["max_tokens", "completion_tokens", "prompt_id"]


def _stored_by_an_older_release(redis_client: redis.Redis, key: str, report: dict[str, Any]) -> None:
    """``report`` with ``OLD``'s features, in the stream as the API stored it before it refused them."""
    redis_client.xadd(key, {"a": json.dumps({**report, "features": OLD})})


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    lines = [r.getMessage() for r in caplog.records if r.name == "service.actuals"]
    return [line for line in lines if line.startswith("left out")]


@pytest.mark.parametrize("unreadable", [False, True], ids=["page-read-whole", "page-read-entry-by-entry"])
def test_the_refused_features_are_left_out_every_row_and_other_feature_kept_and_said_once(
    unreadable: bool, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    log = ActualsLog(redis_client, maxlen=10**6)
    log.append([ActualReport.model_validate(actual_report(0, p, 0)) for p in range(3)])
    for sample in range(2):
        _stored_by_an_older_release(redis_client, log.key, actual_report(0, 9, sample))
    if unreadable:  # an entry that does not read: its page is read entry by entry (``actuals_entry``)
        redis_client.xadd(log.key, {"a": "not json"})
    with caplog.at_level(logging.WARNING, logger="service.actuals"):
        read = log.rows_after(actuals.START)
    assert len(read.rows) == 5
    assert set(read.rows.numeric) | set(read.rows.categorical) == {"x", "Output_Tokens"}
    assert read.rows.numeric["x"][-2:].tolist() == [1.5, 1.5]
    [line] = _said(caplog)
    assert "from 2 stored actuals rows: 'max_tokens', 'completion_tokens', 'prompt_id'" in line, line


def test_a_replica_holds_and_a_retrain_fits_none_of_them_and_a_sync_says_new_ones(
    make_client: AppFactory, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    for report in actual_history(steps=2):
        _stored_by_an_older_release(redis_client, "rs:actuals", report)
    caplog.set_level(logging.WARNING, logger="service.actuals")
    client = make_client(actuals_follow_s=0)  # its start reads the whole stream
    assert len(_said(caplog)) == 1
    assert "from 64 stored actuals rows" in _said(caplog)[0]
    retrained = client.post("/models/retrain")
    assert retrained.status_code == 200, retrained.text
    fitted = json.loads((tmp_path / "models" / "v000001" / "metadata.json").read_text())["features"]
    assert "x" in fitted
    assert not [name for name in fitted if name in LEFT_OUT]
    # an older replica of a rolling upgrade stores one more such report: the next sync says it
    _stored_by_an_older_release(redis_client, "rs:actuals", actual_report(2, 0, 0))
    assert client.get("/models").json()["history_rows"] == 65
    assert "from 1 stored actuals rows" in _said(caplog)[-1]


@pytest.mark.parametrize(
    "name", sorted({*TRACE_COLUMNS, *ALIASES, "MAX_TOKENS", "Output_Tokens", "x", "gap", "tokens"})
)
def test_the_read_leaves_out_exactly_the_names_the_api_refuses(name: str) -> None:
    assert refused(name) == (refusal(name, "report") is not None) == (refusal(name, "item") is not None)


def test_a_read_of_reports_without_such_features_says_nothing(
    redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    log = ActualsLog(redis_client, maxlen=10**6)
    log.append([ActualReport.model_validate(actual_report(0, p, 0)) for p in range(3)])
    with caplog.at_level(logging.WARNING, logger="service.actuals"):
        read = log.rows_after(actuals.START)
    assert len(read.rows) == 3
    assert _said(caplog) == []

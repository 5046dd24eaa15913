"""An actuals entry whose counts the trace format and the API refuse is skipped by the stream reader.

``POST /actuals`` refuses a prompt of no token, a cap of 0, an output past its own cap and one of no
token (422, naming the field), and so does the trace format (``scheduler.trace.parse_row``; an output
of no token since learn53); a release before 2026-12-02 stored the first three, and a foreign writer
still can store any. The reader's one rule (``tracetable.foldable``, and the columnar page read
beside it) kept them: the table holds such a row, and an output past its cap taught the predictor a
length no sample can have. Now both read paths skip the entry, said and
counted as any other entry that does not read, and keep every report beside it. Real Redis.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from scheduler.trace import TraceFormatError, parse_row
from service.api.learning_schemas import ActualReport
from service.learning import actuals
from service.learning.actuals import ActualsLog
from service.learning.actuals_entry import row_or_none
from service.learning.actuals_page import page_trace
from service.learning.shared_texts import SharedTexts
from tests.service.api_helpers import actual_report

REPORT = actual_report(0, 1, 0)  # output 370 tokens of a cap of 2048
# the field the API names, the column the trace format names (an output past its cap: its cap's field,
# the output's column), the report
PAST = {
    "output-past-its-cap": (
        "max_new_tokens",
        "output_tokens",
        {**REPORT, "output_tokens": REPORT["max_new_tokens"] + 1},
    ),
    "a-cap-of-0": ("max_new_tokens", "max_new_tokens", {**REPORT, "max_new_tokens": 0}),
    "a-prompt-of-no-token": ("prompt_tokens", "prompt_tokens", {**REPORT, "prompt_tokens": 0}),
    # the trace format took it (a trace push left it out) until learn53: a generation is at least its EOS
    "an-output-of-no-token": ("output_tokens", "output_tokens", {**REPORT, "output_tokens": 0}),
}
OTHERS = [actual_report(0, p, i) for p in range(4) for i in range(4)]


@pytest.mark.parametrize(("field", "column", "report"), PAST.values(), ids=PAST.keys())
def test_the_api_and_the_trace_format_refuse_each(
    field: str, column: str, report: dict[str, Any], client: TestClient, redis_client: redis.Redis
) -> None:
    response = client.post("/actuals", json={"actuals": [report]})
    assert response.status_code == 422
    assert response.json()["field"] == f"actuals[0].{field}"
    assert redis_client.exists("rs:actuals") == 0
    with pytest.raises(TraceFormatError) as refused:
        parse_row(report, "trace.jsonl", 1)
    assert refused.value.column == column


@pytest.mark.parametrize(("column", "report"), [p[1:] for p in PAST.values()], ids=PAST.keys())
def test_both_read_paths_skip_the_entry_and_keep_every_report_beside_it(
    column: str, report: dict[str, Any], redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    raw = json.dumps(report)  # as a release before 2026-12-02 stored it
    assert page_trace([raw], SharedTexts()) is None  # not read as columns: left to the entry read
    assert row_or_none(raw, SharedTexts()) is None  # which skips it
    log = ActualsLog(redis_client, maxlen=10**6)
    log.append([ActualReport.model_validate(r) for r in OTHERS[:8]])
    bad = redis_client.xadd(log.key, {"a": raw})
    log.append([ActualReport.model_validate(r) for r in OTHERS[8:]])
    counted: list[int] = []
    log.skipped = counted.append
    with caplog.at_level(logging.WARNING, logger="service.actuals"):
        read = log.rows_after(actuals.START)
    assert len(read.rows) == len(OTHERS)
    assert int(read.rows.output_tokens.max()) <= int(read.rows.max_new_tokens.min())
    [said] = [r.getMessage() for r in caplog.records]
    assert str(bad) in said
    assert column in said  # why: the column at fault
    assert counted == [1]

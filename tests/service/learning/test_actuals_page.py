"""The actuals stream read a page at a time into columns (``service.learning.actuals_page``) gives the
rows the entry-by-entry read gave, whatever the page holds: reports as the service writes them (every
optional field set or left out, numeric and text features), entries an older writer or something else
left (read, or skipped and said, as before), and the cursor moves with the rows across pages."""

from __future__ import annotations

import json
import logging
import math
from typing import Any, cast

import numpy as np
import pytest
import redis

from predictors.tracetable import Trace
from service.api.learning_schemas import ActualReport
from service.delivery.stored import REPLY_DECODING
from service.learning import actuals
from service.learning.actuals import ActualsLog, Entry
from service.learning.actuals_entry import row_or_none
from service.learning.actuals_page import page_trace
from service.learning.shared_texts import SharedTexts
from tests.service.api_helpers import actual_report

FOREIGN = {"step": 7, "prompt_id": "p9", "sample_idx": 0, "prompt_tokens": 10, "output_tokens": 5}


def _reports(step: int, count: int) -> list[ActualReport]:
    """``count`` reports of ``step`` that between them set and leave out every optional field."""
    reports = []
    for i in range(count):
        fields: dict[str, Any] = actual_report(step, i % 5, i)
        if i % 3 == 0:
            del fields["reward"], fields["max_new_tokens"]
        if i % 4 == 1:
            fields["schedule_id"] = f"s{step}-{i % 2}"
            fields["finish_reason"] = "length"
            fields["output_tokens"] = fields.get("max_new_tokens", fields["output_tokens"])
        if i % 2:
            fields["features"] = {"domain": ["geometry", "algebra"][i % 4 // 2], "difficulty": float(i % 7)}
        if i % 5 == 2:
            fields["features"] = {"difficulty": "hard"}  # a text value in a column of numbers: text
        reports.append(ActualReport.model_validate(fields))
    return reports


def _one_by_one(values: list[str]) -> tuple[Trace, list[str | None]]:
    """The entries read as the service read every page before: each alone (``row_or_none``)."""
    read = [row for raw in values if (row := row_or_none(raw, SharedTexts())) is not None]
    return Trace.from_rows(row for row, _ in read), [schedule for _, schedule in read]


def _same(a: Trace, b: Trace) -> None:
    """``a`` and ``b`` hold the same rows, column by column (NaN equal to NaN)."""
    for name in ("step", "prompt_id", "sample_idx", "prompt_tokens", "output_tokens", "max_new_tokens"):
        assert getattr(a, name).tolist() == getattr(b, name).tolist(), name
    assert a.finish_reason.tolist() == b.finish_reason.tolist()
    np.testing.assert_array_equal(a.reward, b.reward)
    assert a.numeric.keys() == b.numeric.keys()
    assert a.categorical.keys() == b.categorical.keys()
    for name, column in a.numeric.items():
        np.testing.assert_array_equal(column, b.numeric[name])
    for name, text in a.categorical.items():
        assert text.tolist() == b.categorical[name].tolist(), name


def _stored(log: ActualsLog, client: redis.Redis) -> list[str]:
    """Every entry's ``a`` field, as stored."""
    return [fields.get("a", "") for _, fields in cast(list[Entry], client.xrange(log.key))]


def test_a_page_as_the_service_writes_it_reads_to_the_rows_each_entry_read_alone_gives(
    redis_client: redis.Redis,
) -> None:
    log = ActualsLog(redis_client, maxlen=10**6)
    log.append(_reports(0, 40) + _reports(1, 40))
    values = _stored(log, redis_client)
    plain = page_trace(values, SharedTexts())
    assert plain is not None  # read as columns, not handed back to the entry-by-entry read
    rows, schedules = plain
    expected, expected_schedules = _one_by_one(values)
    _same(rows, expected)
    assert schedules == expected_schedules
    assert len(rows) == 80
    assert {"domain", "difficulty"} <= rows.categorical.keys()


@pytest.mark.parametrize(
    "foreign",
    [
        {**FOREIGN, "step": "7"},
        {**FOREIGN, "finish_reason": ""},
        {**FOREIGN, "prompt_id": 9},
        {**FOREIGN, "sample_idx": True},
        {**FOREIGN, "output_tokens": 2**31},
        {**FOREIGN, "prompt_tokens": -1},
        {**FOREIGN, "reward": True},
    ],
    ids=[
        "count-as-text",
        "empty-finish",
        "numeric-prompt",
        "boolean-count",
        "count-past-the-bound",
        "negative-count",  # the rest found by mutation testing (mutants14): each read by the page
        "boolean-reward",
    ],
)
def test_a_page_with_an_entry_another_writer_left_is_read_entry_by_entry_as_before(
    foreign: dict[str, Any], redis_client: redis.Redis
) -> None:
    log = ActualsLog(redis_client, maxlen=10**6)
    log.append(_reports(0, 10))
    redis_client.xadd(log.key, {"a": json.dumps(foreign)})
    log.append(_reports(1, 10))
    values = _stored(log, redis_client)
    assert page_trace(values, SharedTexts()) is None
    read = log.rows_after(actuals.START)
    expected, expected_schedules = _one_by_one(values)
    _same(read.rows, expected)
    assert read.schedules == expected_schedules


def test_a_mixed_stream_reads_every_report_once_across_pages_and_skips_what_does_not_read(
    redis_client: redis.Redis,  # flushes the database before and after
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(actuals, "PAGE", 4)  # pages of 4: plain ones, and ones with a foreign entry
    client = redis.Redis.from_url(redis_url, **REPLY_DECODING)  # as the service reads (not UTF-8)
    log = ActualsLog(client, maxlen=10**6)
    log.append(_reports(0, 9))
    client.xadd(log.key, {"a": "not json"})
    client.xadd(log.key, {"b": "{}"})  # no field "a"
    client.xadd(log.key, {"a": json.dumps(actual_report(0, 1, 99)).encode() + b"\xff"})  # not UTF-8
    client.xadd(log.key, {"a": json.dumps(actual_report(0, 2, 98), indent=1)})  # older layout: read
    log.append(_reports(1, 7))
    with caplog.at_level(logging.WARNING, logger="service.actuals"):
        read = log.rows_after(actuals.START)
    said = [r.getMessage() for r in caplog.records if "unreadable actuals entr" in r.getMessage()]
    expected, expected_schedules = _one_by_one(_stored(log, client))
    _same(read.rows, expected)
    assert read.schedules == expected_schedules
    assert len(read.rows) == 9 + 1 + 7
    [line] = said  # a read of the whole stream says what it skipped in one line (``ActualsLog._tell``)
    assert line.startswith("skipping 3 unreadable actuals entries")  # not JSON, no field "a", not UTF-8
    client.close()


def test_the_cursor_moves_with_the_rows_so_reads_across_pages_lose_and_double_nothing(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(actuals, "PAGE", 4)
    log = ActualsLog(redis_client, maxlen=10**6)
    cursor, parts = actuals.START, []
    for step, count in enumerate([5, 4, 3, 9]):  # reads that end inside a page and on its edge
        log.append(_reports(step, count))
        if step == 2:
            redis_client.xadd(log.key, {"a": "not json"})  # the last entry read is one that is skipped
        read = log.rows_after(cursor)
        assert not read.restarted
        newest = cast(list[Entry], redis_client.xrevrange(log.key, count=1))[0][0]
        assert read.cursor == newest  # the id of the last entry read, readable or not
        cursor = read.cursor
        parts.append(read.rows)
    assert len(log.rows_after(cursor).rows) == 0  # nothing new: nothing read again
    whole = log.rows_after(actuals.START).rows
    _same(Trace.concat(parts), whole)
    assert len(whole) == 5 + 4 + 3 + 9


@pytest.mark.parametrize(
    "extra",
    [
        ', "output_tokens": 7',  # a key twice: the last one counts, for json and orjson alike
        ', "features": {"x": 1, "x": "t"}',
        ', "reward": -0.0',
        ', "features": {"x": -0.0}',
        ', "reward": 123456789012345678901234567890',  # past 64 bits: orjson reads a float, json an int
        ', "features": {"x": -9223372036854775809}',
    ],
    ids=[
        "count-twice",
        "feature-twice",
        "reward-minus-zero",
        "feature-minus-zero",
        "big-reward",
        "big-feature",
    ],
)
def test_a_page_where_orjson_and_json_might_disagree_reads_to_the_rows_json_gives(
    extra: str, redis_client: redis.Redis
) -> None:
    """review50b: a key given twice, -0.0 and integers past 64 bits read by the page (orjson) to what
    each entry read alone (json) gives, value and sign, whichever path the page takes."""
    log = ActualsLog(redis_client, maxlen=10**6)
    log.append(_reports(0, 4))
    redis_client.xadd(log.key, {"a": json.dumps(FOREIGN)[:-1] + extra + "}"})
    values = _stored(log, redis_client)
    read = log.rows_after(actuals.START).rows
    expected, _ = _one_by_one(values)
    _same(read, expected)
    assert [math.copysign(1.0, r) for r in read.reward.tolist()] == [
        math.copysign(1.0, r) for r in expected.reward.tolist()
    ]
    for name, column in read.numeric.items():
        assert [math.copysign(1.0, v) for v in column.tolist()] == [
            math.copysign(1.0, v) for v in expected.numeric[name].tolist()
        ]


@pytest.mark.parametrize(
    "foreign",
    [{**FOREIGN, "features": [1.0]}, {**FOREIGN, "finish_reason": ["stop"]}, {**FOREIGN, "step": 2**63}],
    ids=["features-not-an-object", "unhashable-finish", "count-past-int64"],
)
def test_a_page_with_an_entry_of_a_shape_no_column_takes_is_not_read_as_columns(
    foreign: dict[str, Any],
) -> None:
    """Neither raises out of the page's read (mutants14): the page is left to the entry-by-entry read."""
    assert page_trace([json.dumps(FOREIGN), json.dumps(foreign)], SharedTexts()) is None

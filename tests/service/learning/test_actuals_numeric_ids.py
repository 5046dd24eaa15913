"""A number another writer left as an id in the actuals stream reads by the trace format's rule.

The API stores ids as text, but the stream is plain Redis: a trainer's own writer, a migration or an
older tool can leave ``"prompt_id": 9.0``. The stream's reader took ``str()`` of it, ``'9.0'`` (and
``'True'`` of ``true``), while a trace file reads the same cell as ``'9'`` or refuses it
(``scheduler.trace.id_cell``): the prompt's history split in two, and a flag or a column of reals
read as prompts. Now the reader keeps the API's text as it is and reads a number as every trace
reader does; what the rule refuses makes the entry unreadable, skipped and said as any other, the
reports beside it kept. The schedule id a report names is read by the same rule. Real Redis.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
import redis

from scheduler.trace import TraceFormatError, parse_row
from service.api.learning_schemas import ActualReport
from service.learning import actuals
from service.learning.actuals import ActualsLog
from tests.service.api_helpers import actual_report

REPORT = actual_report(0, 1, 0)
# a number as written in the stream's JSON -> the id every trace reader reads it as
READ_AS = {
    "9": "9",
    "9.0": "9",
    "9e0": "9",
    "90e-1": "9",
    "-3.0": "-3",
    "9007199254740992.0": "9007199254740992",
}
# what the trace format refuses as an id, and a word of its reason
REFUSED = {
    "1.5": "integer",
    "true": "boolean",
    "NaN": "missing",
    "Infinity": "infinite",
    "9007199254740994.0": "2**53",
}


def _entry(prompt_id: str, **more: str) -> str:
    """The report's JSON as another writer stored it, its prompt id the JSON text ``prompt_id``."""
    fields = ", ".join(f'"{name}": {value}' for name, value in more.items())
    body = json.dumps(REPORT)
    body = body.replace(f'"prompt_id": "{REPORT["prompt_id"]}"', f'"prompt_id": {prompt_id}')
    return body[:-1] + (f", {fields}}}" if fields else "}")


def _read(redis_client: redis.Redis, foreign: list[str]) -> tuple[actuals.Folded, list[int], ActualsLog]:
    log = ActualsLog(redis_client, maxlen=10**6)
    log.append([ActualReport.model_validate({**REPORT, "prompt_id": "9", "sample_idx": 5})])
    for raw in foreign:
        redis_client.xadd(log.key, {"a": raw})
    counted: list[int] = []
    log.skipped = counted.append
    return log.rows_after(actuals.START), counted, log


@pytest.mark.parametrize(("written", "read_as"), READ_AS.items(), ids=READ_AS.keys())
def test_a_numeric_prompt_id_reads_as_a_trace_reads_it(
    written: str, read_as: str, redis_client: redis.Redis
) -> None:
    raw = _entry(written)
    read, counted, _ = _read(redis_client, [raw])
    assert list(read.rows.prompt_id) == ["9", read_as]
    assert counted == []
    assert parse_row(json.loads(raw), "trace.jsonl", 1).prompt_id == read_as  # as a jsonl trace reads it


def test_an_integral_id_shares_the_prompts_history_with_the_apis_text_id(redis_client: redis.Redis) -> None:
    read, _, _ = _read(redis_client, [_entry("9.0"), _entry("9")])
    assert set(read.rows.prompt_id) == {"9"}
    assert len(read.rows) == 3


@pytest.mark.parametrize(("written", "why"), REFUSED.items(), ids=REFUSED.keys())
def test_an_id_the_trace_format_refuses_is_an_unreadable_entry_said_and_skipped(
    written: str, why: str, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    raw = _entry(written)
    with pytest.raises(TraceFormatError) as refused:
        parse_row(json.loads(raw), "trace.jsonl", 1)
    assert refused.value.column == "prompt_id"
    with caplog.at_level(logging.WARNING, logger="service.actuals"):
        read, counted, _ = _read(redis_client, [raw, _entry('"q"')])
    assert list(read.rows.prompt_id) == ["9", "q"]  # the reports beside it kept
    assert counted == [1]
    [said] = [r.getMessage() for r in caplog.records]
    assert "prompt_id" in said
    assert why in said


@pytest.mark.parametrize("written", ["null", "[9]", '{"id": 9}'])
def test_a_missing_id_or_one_that_is_no_value_is_skipped(
    written: str, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="service.actuals"):
        read, counted, _ = _read(redis_client, [_entry(written)])
    assert list(read.rows.prompt_id) == ["9"]
    assert counted == [1]
    assert "prompt_id" in caplog.records[0].getMessage()


def test_the_apis_text_ids_are_kept_as_stored(redis_client: redis.Redis) -> None:
    read, counted, _ = _read(redis_client, [_entry('"9.0"'), _entry('"007"')])
    assert list(read.rows.prompt_id) == ["9", "9.0", "007"]  # text is the id as written
    assert counted == []


SCHEDULES = [("7", "7"), ("7.0", "7"), ('"7.0"', "7.0"), ('"s-1"', "s-1")]


@pytest.mark.parametrize(("written", "read_as"), SCHEDULES)
def test_a_schedule_id_reads_by_the_same_rule(written: str, read_as: str, redis_client: redis.Redis) -> None:
    read, counted, _ = _read(redis_client, [_entry('"q"', schedule_id=written)])
    assert read.schedules == [None, read_as]
    assert counted == []


@pytest.mark.parametrize("written", ["true", "1.5", "[7]"])
def test_a_schedule_id_the_rule_refuses_makes_the_entry_unreadable(
    written: str, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="service.actuals"):
        read, counted, _ = _read(redis_client, [_entry('"q"', schedule_id=written), _entry('"r"')])
    assert list(read.rows.prompt_id) == ["9", "r"]
    assert read.schedules == [None, None]
    assert counted == [1]
    assert "schedule_id" in caplog.records[0].getMessage()


def test_a_sync_after_the_foreign_entry_reads_it_the_same(redis_client: redis.Redis) -> None:
    _, _, log = _read(redis_client, [])
    cursor = log.newest_id()
    redis_client.xadd(log.key, {"a": _entry("12.0", schedule_id="3.0")})
    more: dict[str, Any] = log.rows_after(cursor)._asdict()
    assert list(more["rows"].prompt_id) == ["12"]
    assert more["schedules"] == ["3"]


@pytest.mark.parametrize(("written", "read_as"), [("3", 3), ("3.0", 3), ("3e0", 3), ('"3"', 3)])
def test_a_count_another_writer_left_as_a_float_reads_as_a_trace_reads_it(
    written: str, read_as: int, redis_client: redis.Redis
) -> None:
    raw = _entry('"q"').replace('"step": 0', f'"step": {written}')
    read, counted, _ = _read(redis_client, [raw])
    assert list(read.rows.step) == [0, read_as]
    assert counted == []
    assert parse_row(json.loads(raw), "trace.jsonl", 1).step == read_as


@pytest.mark.parametrize("written", ["2.5", "true", '"1_0"', "NaN"])
def test_a_count_that_is_no_integer_makes_the_entry_unreadable(
    written: str, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    raw = _entry('"q"').replace('"step": 0', f'"step": {written}')
    with caplog.at_level(logging.WARNING, logger="service.actuals"):
        read, counted, _ = _read(redis_client, [raw])
    assert list(read.rows.prompt_id) == ["9"]
    assert counted == [1]
    assert "step" in caplog.records[0].getMessage()

"""Each field of an actuals-stream entry reads alike on both read paths, at its edges.

The stream is read a page at a time as columns where every entry is as the service writes it
(``actuals_page``), else entry by entry (``actuals_entry``), and both must give the same rows, or skip
the same entries, whichever path a page happens to take (one foreign entry sends its whole page to the
entry read). So: a text id is the id as stored, blanks and all, on both (the trace format strips a
text id, but the stream holds what the API stored, which is the id); every count is read by the trace
format's rule (``3.0`` is 3; ``2.5``, ``true`` or ``"1_0"`` make the entry unreadable, said naming the
field), up to the API's bound ``MAX_COUNT`` itself and not past it.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
import redis

from scheduler.trace import TraceRow
from service.api.learning_schemas import ActualReport
from service.api.schemas import MAX_COUNT
from service.learning import actuals
from service.learning.actuals import ActualsLog
from service.learning.actuals_entry import UNREADABLE, entry_row
from service.learning.actuals_page import page_trace
from service.learning.shared_texts import SharedTexts
from tests.service.api_helpers import actual_report

REPORT = {**actual_report(0, 1, 0), "output_tokens": 1}  # a cap of 2048: any count below it fits
COUNTS = ("step", "sample_idx", "prompt_tokens", "output_tokens", "max_new_tokens")


def _with(field: str, text: str) -> str:
    """``REPORT`` as another writer stored it, ``field``'s value the JSON text ``text``."""
    return json.dumps({**REPORT, field: "HERE"}).replace('"HERE"', text)


def _entry(raw: str) -> TraceRow:
    """The entry read of ``raw`` (its row; it raises for an entry that does not read)."""
    row, _ = entry_row(raw, SharedTexts())
    return row


@pytest.mark.parametrize("field", COUNTS)
def test_a_count_of_max_count_reads_on_both_paths_and_one_past_it_on_neither(field: str) -> None:
    at = {**REPORT, field: MAX_COUNT}
    if field == "output_tokens":
        at["max_new_tokens"] = MAX_COUNT
    assert getattr(_entry(json.dumps(at)), field) == MAX_COUNT
    page = page_trace([json.dumps(at)], SharedTexts())
    assert page is not None
    assert getattr(page[0], field).tolist() == [MAX_COUNT]
    past = json.dumps({**at, field: MAX_COUNT + 1})
    assert page_trace([past], SharedTexts()) is None  # left to the entry read, which refuses it
    with pytest.raises(UNREADABLE) as refused:
        _entry(past)
    assert str(refused.value).startswith(f"{field}: ")


@pytest.mark.parametrize("field", COUNTS)
@pytest.mark.parametrize("written", ["3.0", "3e0", "3"])
def test_every_count_another_writer_left_as_a_float_reads_as_the_integer(field: str, written: str) -> None:
    value = getattr(_entry(_with(field, written)), field)
    assert (value, type(value)) == (3, int)


@pytest.mark.parametrize("field", COUNTS)
@pytest.mark.parametrize("written", ["2.5", "true", '"1_0"', "NaN"])
def test_every_count_that_is_no_integer_makes_the_entry_unreadable_naming_it(
    field: str, written: str
) -> None:
    with pytest.raises(UNREADABLE) as refused:
        _entry(_with(field, written))
    assert str(refused.value).startswith(f"{field}=")


def test_a_text_id_is_the_id_as_stored_on_both_paths() -> None:
    raw = json.dumps({**REPORT, "prompt_id": " p 1 ", "schedule_id": " s 1 "})
    row, schedule = entry_row(raw, SharedTexts())
    assert (row.prompt_id, schedule) == (" p 1 ", " s 1 ")
    page = page_trace([raw], SharedTexts())
    assert page is not None
    assert (page[0].prompt_id.tolist(), page[1]) == ([" p 1 "], [" s 1 "])


def test_a_page_sent_to_the_entry_read_keeps_its_text_ids_as_stored(
    redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    log = ActualsLog(redis_client, maxlen=10**6)
    log.append([ActualReport.model_validate(REPORT)])
    stored: dict[str, Any] = {**REPORT, "prompt_id": " q ", "schedule_id": "\ts\t"}
    redis_client.xadd(log.key, {"a": json.dumps(stored)})
    redis_client.xadd(log.key, {"a": _with("prompt_id", "[1]")})  # the page's foreign entry
    counted: list[int] = []
    log.skipped = counted.append
    with caplog.at_level(logging.WARNING, logger="service.actuals"):
        read = log.rows_after(actuals.START)
    assert list(read.rows.prompt_id) == [REPORT["prompt_id"], " q "]
    assert read.schedules == [None, "\ts\t"]
    assert counted == [1]


@pytest.mark.parametrize("field", COUNTS[:4])
def test_an_entry_missing_a_count_is_unreadable_on_both_paths_naming_it(field: str) -> None:
    raw = json.dumps({name: value for name, value in REPORT.items() if name != field})
    assert page_trace([raw], SharedTexts()) is None
    with pytest.raises(UNREADABLE) as refused:
        _entry(raw)
    assert field in str(refused.value)


def test_an_entry_with_no_cap_reads_as_a_length_of_no_known_cap() -> None:
    raw = json.dumps({name: value for name, value in REPORT.items() if name != "max_new_tokens"})
    assert _entry(raw).max_new_tokens is None

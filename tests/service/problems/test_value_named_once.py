"""A 422 names the value at fault once: its detail leads ``field=value`` (``details.named``), so a
validator's words after the lead say what is wrong and what is expected, not the value again. Round 65
left ``step=1.5: expected an integer, got 1.5`` (``scheduler.trace.json_count``) and ``max_new_tokens=5:
output_tokens 9 exceeds max_new_tokens 5`` (``POST /actuals``'s cap check); a trace cell, refused where
no lead is added by a route, still names its value once, by ``TraceFormatError``'s own lead.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from scheduler.trace import TraceFormatError, json_count, parse_row
from tests.service.api.badinput import set_at
from tests.service.api_helpers import actual_report, batch_body


@pytest.fixture
def client(module_app: TestClient, redis_client: redis.Redis) -> TestClient:
    """The module's one app, on a Redis flushed for the test."""
    return module_app


def _said_once(detail: str, lead: str, shown: str) -> None:
    """``detail`` leads with ``lead`` and says ``shown`` (the value as the lead writes it) there alone."""
    assert detail.startswith(f"{lead}={shown}: "), detail
    assert detail.count(shown) == 1, detail


# a bad /schedule field: its path, the value, and the value as the detail's lead writes it
SCHEDULE: dict[str, tuple[str, Any, str]] = {
    "a fractional step": ("step", 1.5, "1.5"),
    "a fractional prompt length": ("batch.items.0.prompt_tokens", 12.5, "12.5"),
    "a fractional cap": ("batch.items.2.max_new_tokens", -0.5, "-0.5"),
}


@pytest.mark.parametrize(("path", "value", "shown"), SCHEDULE.values(), ids=SCHEDULE.keys())
def test_a_fraction_for_a_count_is_named_once(path: str, value: Any, shown: str, client: TestClient) -> None:
    body = batch_body()
    set_at(path, value)(body)
    problem = client.post("/schedule", json=body).json()
    lead = path.replace(".0.", "[0].").replace(".1.", "[1].").replace(".2.", "[2].")
    _said_once(problem["detail"], lead, shown)
    assert problem["detail"] == f"{lead}={shown}: expected an integer"


def test_an_actual_past_its_cap_names_the_cap_once_and_the_output_it_is_below(client: TestClient) -> None:
    report = actual_report(0, 1, 0)
    report["max_new_tokens"] = 5
    report["output_tokens"] = 9
    problem = client.post("/actuals", json={"actuals": [report]}).json()
    _said_once(problem["detail"], "actuals[0].max_new_tokens", "5")
    assert problem["detail"].startswith("actuals[0].max_new_tokens=5: must be >= output_tokens=9: ")
    assert (problem["field"], problem["value"]) == ("actuals[0].max_new_tokens", 5)


def test_a_nan_count_is_named_once(client: TestClient) -> None:
    text = json.dumps({"actuals": [actual_report(0, 1, 0) | {"step": "NAN"}]}).replace('"NAN"', "NaN")
    response = client.post("/actuals", content=text, headers={"Content-Type": "application/json"})
    _said_once(response.json()["detail"], "actuals[0].step", "nan")


def test_the_count_check_s_own_words_name_no_value() -> None:
    with pytest.raises(ValueError) as refused:
        json_count(1.5)
    assert str(refused.value) == "expected an integer"


def test_a_trace_cell_is_named_once_by_the_trace_error_s_own_lead() -> None:
    """Where no 422 adds a lead (``trace import``, ``trace stats``), ``TraceFormatError`` is it."""
    cells = {"step": "1.5", "prompt_id": "p", "sample_idx": "0", "prompt_tokens": "3", "output_tokens": "2"}
    with pytest.raises(TraceFormatError) as refused:
        parse_row(cells, "t.csv", 2)
    assert str(refused.value) == "t.csv:2:step='1.5': expected an integer"


def test_a_bad_after_is_refused_in_words_not_a_pattern(client: TestClient) -> None:
    """``after=0`` (a trainer's guess at the first page) read ``String should match pattern
    '^[0-9]{1,20}-[0-9]{1,20}$'``: tried against a served service, the one documented refusal whose
    words did not say what to send (user66); the OpenAPI document keeps the pattern."""
    problem = client.get("/schedule/s1/results", params={"after": "0"}).json()
    assert problem["detail"] == (
        "after='0': expected a stream id, <ms>-<seq> in digits, as a page's next gives it (0-0: the first)"
    )
    parameters = client.get("/openapi.json").json()["paths"]["/schedule/{schedule_id}/results"]["get"]
    after = next(p for p in parameters["parameters"] if p["name"] == "after")
    assert after["schema"]["pattern"] == "^[0-9]{1,20}-[0-9]{1,20}$"

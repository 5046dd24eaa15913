"""A count sent as a JSON number with no fraction (``1.0``, ``1e2``) is that integer, as a trace reads it.

JSON has one number type: ``1.0`` and ``1`` are the same number, JSON Schema's ``integer`` (the type
the API's own OpenAPI schema gives a count) takes both, and writers emit ``1.0`` for an integer that
went through a float (Python's ``json`` of a pandas float column, a numpy float). The trace format
reads such a step as 1 in every format (``scheduler.trace.int_cell``), but the API, strict, refused
it (422 ``Input should be a valid integer``): one report taken from a trace file and refused from a
JSON body. The counts every entry shares with the trace (step, sample index, prompt, output and cap
tokens) now read a number by the trace's rule, in ``POST /actuals``, ``POST /schedule`` and the
sidecar's ``/done`` alike; what the rule refuses (``1.5``, NaN, an infinity) is a 422 naming the field,
and what strictness refuses (``true``, the text ``"1"``) stays refused: JSON says those are no number.
"""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
import redis
from fastapi.testclient import TestClient

from scheduler.trace import parse_row
from tests.service.api_helpers import actual_report, batch_body


@pytest.fixture
def client(module_app: TestClient, redis_client: redis.Redis) -> TestClient:
    """The module's one app (``module_app``), on a Redis flushed for the test:
    a count's reading is the body's."""
    return module_app


REPORT = actual_report(1, 2, 3)
COUNTS = ("step", "sample_idx", "prompt_tokens", "output_tokens", "max_new_tokens")
# a count's JSON text -> how the trace format and the API read it
READ = {"1.0": 1, "1e2": 100, "3.00": 3, "0.7e1": 7}
# a JSON text the API refuses as a count, and a word its 422 says
REFUSED = {"1.5": "integer", "NaN": "integer", "Infinity": "integer", "true": "integer", '"1"': "integer"}


def _with(field: str, text: str) -> str:
    """``REPORT`` in a body of one report, ``field``'s value the JSON text ``text``."""
    body = json.dumps({"actuals": [{**REPORT, field: "HERE"}]})
    return body.replace('"HERE"', text)


def _post(client: TestClient, body: str, path: str = "/actuals") -> Any:
    return client.post(path, content=body, headers={"content-type": "application/json"})


@pytest.mark.parametrize("field", COUNTS)
@pytest.mark.parametrize(("text", "value"), READ.items(), ids=READ.keys())
def test_an_integral_number_is_the_integer_in_a_report_as_in_a_trace_row(
    field: str, text: str, value: int, client: TestClient, redis_client: redis.Redis
) -> None:
    body = _with(field, text)
    if field == "max_new_tokens":
        body = body.replace(f'"output_tokens": {REPORT["output_tokens"]}', '"output_tokens": 1')
    response = _post(client, body)
    assert response.status_code == 200, response.json()
    assert response.json()["accepted"] == 1
    [(_, fields)] = cast(list[tuple[str, dict[str, str]]], redis_client.xrange("rs:actuals"))
    assert json.loads(fields["a"])[field] == value  # stored as the integer, in the API's own form
    row = json.loads(body)["actuals"][0]
    assert getattr(parse_row(row, "trace.jsonl", 1), field) == value  # as a jsonl trace reads it


def test_a_report_sent_with_1_0_and_resent_with_1_is_one_report(client: TestClient) -> None:
    first = _post(client, _with("step", "1.0"))
    again = client.post("/actuals", json={"actuals": [REPORT]})
    assert (first.json()["accepted"], again.json()["accepted"], again.json()["repeated"]) == (1, 0, 1)


@pytest.mark.parametrize("field", ["step", "sample_idx", "prompt_tokens", "output_tokens"])
@pytest.mark.parametrize(("text", "why"), REFUSED.items(), ids=REFUSED.keys())
def test_what_is_no_integer_is_a_422_naming_the_field(
    field: str, text: str, why: str, client: TestClient, redis_client: redis.Redis
) -> None:
    response = _post(client, _with(field, text))
    assert response.status_code == 422
    assert response.json()["field"] == f"actuals[0].{field}"
    assert why in response.json()["detail"]
    assert redis_client.exists("rs:actuals") == 0


def test_a_fraction_is_refused_in_words_that_say_so(client: TestClient) -> None:
    response = _post(client, _with("step", "1.5"))
    assert response.json()["detail"] == "actuals[0].step=1.5: expected an integer"


def test_a_schedule_takes_an_integral_step_and_token_counts(client: TestClient) -> None:
    body = batch_body(prompts=2, n=2, workers=1)
    text = json.dumps(body).replace('"prompt_tokens": 100,', '"prompt_tokens": 100.0,')
    text = text.replace('"max_new_tokens": 2048', '"max_new_tokens": 2048.0')
    text = text[:-1] + ', "step": 4.0}'
    response = _post(client, text, "/schedule")
    assert response.status_code == 200, response.json()
    assert response.json()["step"] == 4


@pytest.mark.parametrize("text", ["4.5", "true", "NaN"])
def test_a_schedule_refuses_a_step_that_is_no_integer(text: str, client: TestClient) -> None:
    body = json.dumps(batch_body(prompts=2, n=2, workers=1))[:-1] + f', "step": {text}}}'
    response = _post(client, body, "/schedule")
    assert response.status_code == 422
    assert response.json()["field"] == "step"


def test_an_item_s_samples_written_2_0_are_2_as_every_other_count(client: TestClient) -> None:
    """``n`` was the one count of a body that refused ``2.0`` (``Input should be a valid integer``)
    while the step and the token counts beside it took it (user66 noticed): one rule for every count."""
    text = json.dumps(batch_body(prompts=2, n=2, workers=1)).replace('"n": 2,', '"n": 2.0,')
    response = _post(client, text, "/schedule")
    assert response.status_code == 200, response.json()
    assert sum(len(queue) for queue in response.json()["assignments"].values()) == 4


def test_an_item_s_samples_with_a_fraction_are_refused_naming_them(client: TestClient) -> None:
    text = json.dumps(batch_body(prompts=2, n=2, workers=1)).replace('"n": 2,', '"n": 2.5,', 1)
    response = _post(client, text, "/schedule")
    assert response.status_code == 422
    assert response.json()["detail"] == "batch.items[0].n=2.5: expected an integer"

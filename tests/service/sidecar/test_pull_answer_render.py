"""The pull API's error answers as rendered bytes (``AsciiJSONResponse``, shared with the service's
problems since review67 found the sidecar's copy of it line for line): ASCII, and never a
``NaN``, which no JSON parser takes. Found by mutation testing of round 66's code (docs/experiments.md,
"Mutation testing of round 66's new code"): with ``allow_nan`` on, every pull test still passed, since
the 422s name a NaN as text before rendering (``details.echo``); this holds the renderer to it too.
"""

from __future__ import annotations

import json

import pytest
from starlette.requests import Request

from service.delivery.errors import UnknownScheduleError
from service.problems.table import AsciiJSONResponse, ProblemResponse
from service.sidecar.pull_problems import problem


def test_an_answer_is_ascii_json_a_lone_surrogate_escaped() -> None:
    body = AsciiJSONResponse({"error": "output='\ud800'", "value": "\ud800é"}, status_code=422).body
    assert body == b'{"error":"output=\'\\ud800\'","value":"\\ud800\\u00e9"}'
    assert json.loads(bytes(body))["value"] == "\ud800é"


@pytest.mark.parametrize("number", [float("nan"), float("inf")])
def test_a_number_json_cannot_carry_is_refused_not_rendered(number: float) -> None:
    with pytest.raises(ValueError):
        AsciiJSONResponse({"error": "x", "value": number}, status_code=422)


def test_the_pull_api_answers_with_the_services_rendering_but_as_plain_json() -> None:
    request = Request({"type": "http", "method": "POST", "path": "/done", "headers": [], "query_string": b""})
    answer = problem(request, UnknownScheduleError("s\ud800"), [])
    assert type(answer) is AsciiJSONResponse
    assert issubclass(ProblemResponse, AsciiJSONResponse)
    assert answer.media_type == "application/json"
    assert bytes(answer.body).isascii()

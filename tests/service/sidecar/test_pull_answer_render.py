"""The pull API's error answers as rendered bytes (``pull_problems._Answer``): ASCII, and never a
``NaN``, which no JSON parser takes. Found by mutation testing of round 66's code (docs/experiments.md,
"Mutation testing of round 66's new code"): with ``allow_nan`` on, every pull test still passed, since
the 422s name a NaN as text before rendering (``details.echo``); this holds the renderer to it too.
"""

from __future__ import annotations

import json

import pytest

from service.sidecar.pull_problems import _Answer


def test_an_answer_is_ascii_json_a_lone_surrogate_escaped() -> None:
    body = _Answer({"error": "output='\ud800'", "value": "\ud800é"}, status_code=422).body
    assert body == b'{"error":"output=\'\\ud800\'","value":"\\ud800\\u00e9"}'
    assert json.loads(bytes(body))["value"] == "\ud800é"


@pytest.mark.parametrize("number", [float("nan"), float("inf")])
def test_a_number_json_cannot_carry_is_refused_not_rendered(number: float) -> None:
    with pytest.raises(ValueError):
        _Answer({"error": "x", "value": number}, status_code=422)

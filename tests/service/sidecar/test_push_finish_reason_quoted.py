"""The push sidecar's warning for an engine's finish reason of no certain meaning quotes the word as
JSON and at most 80 characters of it: an engine (or a gateway in front of it) may answer any text or
object there, and one warning a result must stay one readable line, however long the word it got.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from service.delivery.records import Lease
from service.sidecar.engine_reply import parse_reply, result_of
from service.sidecar.holdings import Held
from tests.service.sidecar.procs import item


def _warned(said: Any, caplog: pytest.LogCaptureFixture) -> str:
    """The warning line ``result_of`` writes for an engine's answer that ended with ``said``."""
    answer = {"choices": [{"text": "out", "finish_reason": said}], "usage": {"completion_tokens": 4}}
    lease = Lease("s", "w0", item("p", 0, 4), token=1, deadline_ms=0, attempt=1)
    with caplog.at_level(logging.WARNING, logger="service.sidecar"):
        result = result_of(Held(lease, 0), parse_reply(answer, 0.1, 512), 1.0)
    assert (result.finish_reason, result.extra["engine_finish_reason"]) == ("abort", said)
    (line,) = [r.getMessage() for r in caplog.records if "has no certain meaning" in r.getMessage()]
    return line.removeprefix("p#0: the engine's finish_reason ").split(" has no certain meaning")[0]


def test_a_short_word_is_quoted_whole(caplog: pytest.LogCaptureFixture) -> None:
    assert _warned("timeout", caplog) == '"timeout"'


def test_a_word_of_80_characters_quoted_is_quoted_whole(caplog: pytest.LogCaptureFixture) -> None:
    word = "x" * 78  # with its two quotes, 80 characters
    assert _warned(word, caplog) == f'"{word}"'


def test_a_longer_word_is_cut_to_80_characters_ending_in_dots(caplog: pytest.LogCaptureFixture) -> None:
    shown = _warned("y" * 79, caplog)
    assert (len(shown), shown) == (80, '"' + "y" * 76 + "...")


def test_an_object_is_quoted_as_json_cut_the_same(caplog: pytest.LogCaptureFixture) -> None:
    said = {"type": "eos", "detail": "z" * 200}
    shown = _warned(said, caplog)
    assert (len(shown), shown[:20]) == (80, '{"type": "eos", "det')

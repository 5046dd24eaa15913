"""``after`` of ``GET /schedule/{id}/results`` checked in words (``progress_schemas.stream_id``): the
whole text must be a stream id. Found by mutation testing of round 66's code (docs/experiments.md,
"Mutation testing of round 66's new code"): read with ``re.match``, whose ``$`` also matches before a
final newline, ``0-0\\n`` passed, and every test still did.
"""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter, ValidationError

from service.api.progress_schemas import StreamId, stream_id


@pytest.mark.parametrize("text", ["0-0", "1700000000000-3", "18446744073709551615-18446744073709551615"])
def test_a_stream_id_is_taken_as_it_came(text: str) -> None:
    assert stream_id(text) == text


@pytest.mark.parametrize(
    "text", ["0-0\n", "0-0 ", " 0-0", "0", "-0", "0-", "0-0-0", "123456789012345678901-0"]
)
def test_anything_more_or_less_than_a_stream_id_is_refused_in_words(text: str) -> None:
    with pytest.raises(ValueError, match=r"^expected a stream id, <ms>-<seq> in digits"):
        stream_id(text)


@pytest.mark.parametrize("text", ["18446744073709551616-0", "0-18446744073709551616", "9" * 20 + "-0"])
def test_a_part_past_2_64_is_refused_by_the_type_for_every_reader(text: str) -> None:
    with pytest.raises(ValidationError, match=r"is past the largest stream id \(each part < 2\^64\)"):
        TypeAdapter(StreamId).validate_python(text)

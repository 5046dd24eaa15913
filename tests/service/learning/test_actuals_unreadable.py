"""A stored actuals entry that is not UTF-8 is skipped, and its warning quotes a bounded head of its
bytes as stored: enough to find it, never a whole entry (a report's text may run to megabytes)."""

from __future__ import annotations

import json

import pytest

from service.learning.actuals_entry import entry_row, row_or_none
from service.learning.shared_texts import SharedTexts

ENTRY = {"step": 1, "prompt_id": "p0", "sample_idx": 0, "prompt_tokens": 10, "output_tokens": 5}


def test_an_entry_that_is_not_utf8_is_skipped_and_its_warning_quotes_its_first_80_bytes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stored = json.dumps({**ENTRY, "features": {"tag": "x" * 500}}).encode() + b"\xff"
    raw = stored.decode("utf-8", "surrogateescape")  # as the service's clients read it back
    assert row_or_none(raw, SharedTexts()) is None
    with pytest.raises(ValueError) as skipped:  # why the read skips it: what its warning says
        entry_row(raw, SharedTexts())
    warning = str(skipped.value)
    assert repr(stored[:80]) in warning
    assert repr(stored[:81]) not in warning


def test_the_same_entry_in_utf8_is_read() -> None:
    read = row_or_none(json.dumps(ENTRY), SharedTexts())
    assert read is not None
    assert (read[0].prompt_id, read[0].output_tokens) == ("p0", 5)

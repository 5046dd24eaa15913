"""Whatever an actuals entry holds, the stream reader keeps it only where the trace table holds it: a
property over entries whose every field may be what the service writes or any other JSON value
(poison51: a kept entry that ``Trace.from_rows`` refused failed every later sync). And a page read as
columns (``actuals_page``) reads to the rows its entries read one by one give, or is left to them."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from predictors.tracetable import Trace
from service.learning.actuals_entry import row_or_none
from service.learning.actuals_page import page_trace
from service.learning.shared_texts import SharedTexts
from tests.text_alphabet import UTF8

ANY_JSON: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**400), max_value=10**400)
    | st.floats()  # NaN and infinities too: ``json.dumps`` writes them, ``json.loads`` reads them
    | st.text(UTF8, max_size=8)
    | st.sampled_from(["stop", "length", "abort", "", "7", "0.5"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(UTF8, max_size=3), inner, max_size=3),
    max_leaves=6,
)
GOOD: dict[str, st.SearchStrategy[Any]] = {
    "step": st.integers(0, 40),
    "prompt_id": st.sampled_from(["p0", "p1"]),
    "sample_idx": st.integers(0, 16),
    "prompt_tokens": st.integers(1, 4096),
    "output_tokens": st.integers(0, 4096),
    "max_new_tokens": st.integers(4096, 8192),
    "finish_reason": st.sampled_from(["stop", "length"]),
    "reward": st.floats(-1, 1),
    "schedule_id": st.sampled_from(["s0", "s1"]),
    "features": st.dictionaries(st.sampled_from(["d", "t"]), st.floats(0, 9) | st.sampled_from(["a", "b"])),
}


@st.composite
def entries(draw: st.DrawFn) -> str:
    """One entry's ``a`` field: mostly reports with a field or two anything at all, some not even that."""
    if draw(st.integers(0, 9)) == 0:
        return json.dumps(draw(ANY_JSON))
    doc = {name: draw(value) for name, value in GOOD.items()}
    for name in draw(st.lists(st.sampled_from(sorted(GOOD)), max_size=2)):
        if draw(st.booleans()):
            doc[name] = draw(ANY_JSON)
        else:
            doc.pop(name, None)
    return json.dumps(doc)


@settings(max_examples=400)
@given(st.lists(entries(), min_size=1, max_size=6))
def test_every_entry_the_reader_keeps_the_trace_table_holds(values: list[str]) -> None:
    kept = [read[0] for raw in values if (read := row_or_none(raw, SharedTexts())) is not None]
    trace = Trace.from_rows(kept)  # raised, before, for a kept "abort", [1.0] or "high"
    assert len(trace) == len(kept)


@settings(max_examples=400)
@given(st.lists(entries(), min_size=1, max_size=6))
def test_a_page_read_as_columns_reads_to_the_rows_its_entries_read_alone_give(values: list[str]) -> None:
    page = page_trace(values, SharedTexts())
    if page is None:
        return  # left to the entry-by-entry read, the property above
    kept = [read for raw in values if (read := row_or_none(raw, SharedTexts())) is not None]
    alone = Trace.from_rows(row for row, _ in kept)
    rows, schedules = page
    assert list(rows.rows()) == list(alone.rows())
    assert (rows.numeric.keys(), rows.categorical.keys()) == (alone.numeric.keys(), alone.categorical.keys())
    assert schedules == [schedule for _, schedule in kept]

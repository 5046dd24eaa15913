"""One actuals-stream entry read on its own: the entry-by-entry path beside ``actuals_page``'s columns.

``service.learning.actuals`` reads a page of the stream as columns where every entry is in the form the
service writes (``actuals_page``), else entry by entry here, where an entry that does not read (written by
something else, or by an older release) raises one of ``UNREADABLE`` with why, and the read skips it and
says so. Each value is read by the trace format's own rule (``scheduler.trace``), so a report reads as
the same row whether it came in a trace file or the stream.
"""

from __future__ import annotations

import json

from predictors.tracetable import foldable
from scheduler.trace import TraceRow, id_cell, int_cell
from service.api.schemas import MAX_COUNT
from service.delivery.stored import utf8
from service.learning.shared_texts import SharedTexts

UNREADABLE = (ValueError, KeyError, TypeError, RecursionError)  # what ``entry_row`` raises for an entry


def row_or_none(raw: str, texts: SharedTexts) -> tuple[TraceRow, str | None] | None:
    """``entry_row``, None where the entry does not read (the read's rows, without why)."""
    try:
        return entry_row(raw, texts)
    except UNREADABLE:
        return None


def entry_row(raw: str, texts: SharedTexts) -> tuple[TraceRow, str | None]:
    """One stored report as a trace row, and the schedule it names (None: none); JSON is parsed
    directly (it was validated when stored), which reads a 2M-entry history at startup ~10x faster
    than re-validating every report.

    An entry that no longer reads (written by something else, or stored before the API bounded its
    counts) raises one of ``UNREADABLE``, and the read skips it and says so, naming its id so it
    can be found, and deleted, by hand (``actuals.ActualsLog._tell``): failing on it would fail every later
    read of the history, and so every replica's start-up, until someone deleted it by hand. So is
    one that is not UTF-8 (its bytes arrive as lone surrogates, ``service/delivery/stored.py``):
    its JSON may parse, but its prompt id is no prompt's, and its text no text the API stores. So
    is one whose fields the trace table would not hold (``foldable``: a finish reason "abort",
    features that are not an object, a reward that is not a finite number): it would raise out of
    ``Trace.from_rows`` for the whole page, on every later sync and every replica's start
    (poison51); so would JSON that is not an object (``[1]``), or nested too deep for ``json``
    (``RecursionError``)."""
    if not utf8(raw):
        raise ValueError(f"not UTF-8: {raw.encode('utf-8', 'surrogateescape')[:80]!r}")
    doc = json.loads(raw)
    if not isinstance(doc, dict):
        raise TypeError(f"not a JSON object but {type(doc).__name__}")
    schedule = doc.get("schedule_id")
    row = foldable(
        TraceRow(
            step=_count(doc["step"], "step"),
            prompt_id=texts(_stored_id(doc["prompt_id"], "prompt_id")),
            sample_idx=_count(doc["sample_idx"], "sample_idx"),
            prompt_tokens=_count(doc["prompt_tokens"], "prompt_tokens"),
            output_tokens=_count(doc["output_tokens"], "output_tokens"),
            max_new_tokens=None
            if doc.get("max_new_tokens") is None
            else _count(doc["max_new_tokens"], "max_new_tokens"),
            finish_reason=doc.get("finish_reason"),
            reward=doc.get("reward"),
            features=texts.features(doc.get("features", {})),
        )
    )
    return row, None if schedule is None else texts(_stored_id(schedule, "schedule_id"))


def _stored_id(value: object, field: str) -> str:
    """An id as the stream holds it: the API's text as stored, a number another writer left read as
    every trace reader reads one (``scheduler.trace.id_cell``: ``9.0`` is ``'9'``, the prompt a text
    ``"9"`` names), a ``ValueError`` naming ``field`` for what that rule refuses (``1.5``, ``true``,
    NaN...) and for null or a list: ``str()`` of it made ``'9.0'``, ``'True'`` and ``'None'`` ids,
    one prompt's history split in two and flags taken for prompts."""
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, (list, dict)):
        raise ValueError(f"{field}={value!r}: an id is text or a number")
    try:
        return id_cell(value)
    except ValueError as error:
        raise ValueError(f"{field}={value!r}: {error}") from None


def _count(value: object, field: str) -> int:
    """A stored count as an int, read as a trace reads one (``scheduler.trace.int_cell``: ``3`` and
    ``3.0``, never ``2.5``, ``true`` or ``"1_0"``), refused (``ValueError`` naming ``field``) outside
    what the API accepts. ``int(str())`` refused another writer's ``3.0`` and took ``"1_0"`` as 10."""
    try:
        number = int_cell(value, field, 0)
    except ValueError as error:
        raise ValueError(f"{field}={value!r}: {error}") from None
    if number > MAX_COUNT:
        raise ValueError(f"{field}: count {number} is outside [0, {MAX_COUNT}]")
    return number

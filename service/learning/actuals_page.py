"""A page of actuals-stream entries read straight into trace columns, with no ``TraceRow`` per entry.

Why: a replica syncs every report any replica stored, and at start it reads the whole stream (1.2 M
entries at 36 steps of 2,048 x 16). Read entry by entry (``actuals_entry.entry_row``: parse, a ``TraceRow``,
then ``Trace.from_rows`` copying each row's fields into column lists), the rows cost ~0.3 s of CPU
per 32,768 entries, more than the stream read itself once hiredis parses it (docs/experiments.md,
sync50). Here each entry is still parsed on its own (one entry that does not read must not take its
neighbours with it), by ``orjson`` (~3x ``json.loads``), and every column is then taken from the
parsed reports at once and checked as a column.

Only a page whose every entry is in the form the service writes (``ActualReport``'s JSON: integer counts in
range, each at least the trace format's least (``scheduler.trace.MINIMUM``), no output past its cap, a
string prompt id, a string schedule id or none, a known finish reason or none, a numeric reward or none, a
features object of text and numbers: ``predictors.tracetable``'s ``finite_number`` and ``feature_value``,
the rules the entry-by-entry read keeps a value by, ``foldable``) is read here; any other page (an entry
written by something else, or by an older release, that is not UTF-8, or not a report at all) is answered
``None``, and the caller reads it entry by entry as before, which skips what does not read and says so. So a
page reads to the same rows either way, and the stream's wire format (one field ``a``, the report's JSON) is
unchanged. Where ``orjson`` and ``json`` read a text differently it is one ``orjson`` refuses (``NaN``,
``1e400``, an escaped lone surrogate) or reads as a float (an integer past 64 bits, which no count may be):
the page is then read by the entry-by-entry path, with ``json``, as before."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson

from predictors.tracetable import (
    FloatArray,
    IntArray,
    ObjArray,
    Trace,
    feature_value,
    finite_number,
    typed_extras,
)
from scheduler.trace import MINIMUM
from service.api.schemas import MAX_COUNT
from service.delivery.stored import utf8
from service.learning.shared_texts import SharedTexts

_COUNTS = ("step", "sample_idx", "prompt_tokens", "output_tokens")
_FINISH = {None: -1, "stop": 0, "length": 1}  # as ``TraceBuilder`` codes them (``FINISH_NAMES``)
_NO_FEATURES: dict[str, Any] = {}


class _NotPlainError(Exception):
    """An entry of the page is not in the form the service writes: read the page entry by entry."""


def page_trace(values: Sequence[str], texts: SharedTexts) -> tuple[Trace, list[str | None]] | None:
    """The reports ``values`` (each entry's ``a`` field, in stream order) as one trace, and the
    schedule each named (None: none); None where any of them is not plain (module doc)."""
    try:
        docs = [_parsed(raw) for raw in values]
        counts = {name: _counts([doc[name] for doc in docs], MINIMUM[name]) for name in _COUNTS}
        caps = _caps([doc.get("max_new_tokens") for doc in docs], counts["output_tokens"])
        prompts = _prompts(docs, texts)
        finish = np.array([_FINISH[doc.get("finish_reason")] for doc in docs], dtype=np.int8)
        reward = _rewards(docs)
        numeric, categorical = typed_extras(len(docs), _extras(docs, texts))
        schedules = _schedules(docs, texts)
    except (_NotPlainError, KeyError, TypeError):  # TypeError: an unhashable finish reason
        return None
    trace = Trace(
        **counts,
        prompt_id=prompts,
        max_new_tokens=caps,
        finish_reason=finish,
        reward=reward,
        numeric=numeric,
        categorical=categorical,
    )
    return trace, schedules


def _parsed(raw: str) -> dict[str, Any]:
    """One entry's report as a dict; ``_NotPlainError`` where it is not UTF-8, not JSON ``orjson``
    reads, or not an object."""
    if not utf8(raw):
        raise _NotPlainError
    try:
        doc = orjson.loads(raw)
    except ValueError:
        raise _NotPlainError from None
    if type(doc) is not dict:
        raise _NotPlainError
    return doc


def _counts(values: list[Any], least: int = 0) -> IntArray:
    """A count column; ``_NotPlainError`` unless every value is an int (not a bool, nor a numeric string,
    which the entry-by-entry read takes) within ``[least, MAX_COUNT]``, the API's bounds (``least``: the
    trace format's, ``scheduler.trace.MINIMUM``, which ``tracetable.foldable`` holds the entry to)."""
    if not all(type(value) is int for value in values):
        raise _NotPlainError
    try:
        column = np.array(values, dtype=np.int64)
    except OverflowError:
        raise _NotPlainError from None
    if len(column) and (int(column.min()) < least or int(column.max()) > MAX_COUNT):
        raise _NotPlainError
    return column


def _caps(given: list[Any], outputs: IntArray) -> IntArray:
    """The caps, 0 where none; ``_NotPlainError`` unless each given one is a count of at least one
    and no output is past its cap (``tracetable.foldable``'s rule: the entry read skips the entry)."""
    caps = _counts([0 if cap is None else cap for cap in given])
    if 0 in given or bool(np.any((caps > 0) & (outputs > caps))):
        raise _NotPlainError
    return caps


def _prompts(docs: list[dict[str, Any]], texts: SharedTexts) -> ObjArray:
    """The prompt ids, one shared object per distinct id; ``_NotPlainError`` unless every one is a string."""
    ids = [doc["prompt_id"] for doc in docs]
    if not all(type(prompt) is str for prompt in ids):
        raise _NotPlainError
    column = np.empty(len(ids), dtype=object)
    column[:] = [texts(prompt) for prompt in ids]
    return column


def _schedules(docs: list[dict[str, Any]], texts: SharedTexts) -> list[str | None]:
    """The schedule each report named (None: none); ``_NotPlainError`` unless each is a string or
    none: a number another writer left is read by the trace's id rule, entry by entry (``actuals``)."""
    named = [doc.get("schedule_id") for doc in docs]
    if not all(schedule is None or type(schedule) is str for schedule in named):
        raise _NotPlainError
    return [None if schedule is None else texts(schedule) for schedule in named]


def _rewards(docs: list[dict[str, Any]]) -> FloatArray:
    """The rewards, NaN where none; ``_NotPlainError`` unless each is none or a finite number (not a
    bool), by the rule the entry-by-entry read keeps them by (``tracetable.finite_number``)."""
    rewards = [doc.get("reward") for doc in docs]
    if not all(reward is None or finite_number(reward) for reward in rewards):
        raise _NotPlainError
    return np.array([math.nan if reward is None else reward for reward in rewards], dtype=np.float64)


def _extras(docs: list[dict[str, Any]], texts: SharedTexts) -> dict[str, dict[int, float | str]]:
    """Each feature name's values by row index, text values shared, as ``TraceBuilder`` collects
    them; ``_NotPlainError`` unless every report's features, where present, are an object of text or
    finite numbers (``tracetable.feature_value``, the entry-by-entry read's rule: a ``true``, a
    ``null`` or a list is refused there, so here the page is left to it)."""
    extras: dict[str, dict[int, float | str]] = {}
    for index, doc in enumerate(docs):
        features = doc.get("features", _NO_FEATURES)
        if type(features) is not dict:
            raise _NotPlainError
        for name, value in features.items():
            if not feature_value(value):
                raise _NotPlainError
            extras.setdefault(name, {})[index] = texts(value) if type(value) is str else value
    return extras

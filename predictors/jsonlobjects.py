"""JSON Lines read strictly: one object a line, each key once, text that is UTF-8.

``json.loads`` alone is lenient where a trace must not be: it keeps the last of a key given twice and
decodes a lone ``\\ud800`` escape to text that no UTF-8 writer accepts. Both trace readers of jsonl
(``predictors.traceio`` for ``read_trace``, ``service.traceimport.importers`` for ``trace import``) take their
records from ``jsonl_objects``, so the two refuse the same lines with the same located errors.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from predictors.tracerename import FileNamedError
from scheduler.trace import TraceFormatError


def jsonl_objects(path: Path) -> Iterator[tuple[int, dict[str, object]]]:
    """(line, object) per non-blank line of a JSON Lines file; a bad line names file and line.
    A byte-order mark before the first line is skipped, as csv's is (json.loads refuses one)."""
    with path.open(encoding="utf-8-sig") as handle:
        for line, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            try:
                cells = json.loads(text)
            except json.JSONDecodeError as exc:
                raise TraceFormatError(str(path), line, "<json>", text.strip()[:40], exc.msg) from None
            if not isinstance(cells, dict):
                raise TraceFormatError(str(path), line, "<json>", cells, "each line must be a JSON object")
            if text.count(":") > len(cells):  # each key has its ':'; fewer keys kept: maybe one twice
                json.loads(text, object_pairs_hook=partial(_unique_keys, source=str(path), line=line))
            if "\\u" in text:  # only an escape can decode to a lone surrogate
                _refuse_surrogates(cells, str(path), line)
            yield line, cells


def _unique_keys(pairs: list[tuple[str, Any]], source: str, line: int) -> dict[str, Any]:
    """A JSON object as a dict, refusing a key it holds twice: ``json.loads`` kept the last value
    silently (``"output_tokens":7,"output_tokens":9`` read as 9), where csv refuses a repeated column.
    The hook costs 27% of reading a line, so only a line with more ':' than keys is read with it."""
    cells = dict(pairs)
    if len(cells) != len(pairs):
        repeated = next(key for i, (key, _) in enumerate(pairs) if key in dict(pairs[:i]))
        raise FileNamedError(source, line, repeated, None, "appears twice in the line")
    return cells


def _refuse_surrogates(cells: dict[str, object], source: str, line: int) -> None:
    """Refuse a key or text value holding an unpaired surrogate (``"\\ud800"`` decodes to one): it is
    no UTF-8 text, so writing the trace, hashing a prompt or tokenizing it failed with a traceback."""
    for name, value in cells.items():
        for text in (name, value):
            if isinstance(text, str) and not text.isascii():
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:
                    column = name.encode("utf-8", "backslashreplace").decode("utf-8")
                    raise FileNamedError(
                        source, line, column, value, "not UTF-8 text (an unpaired \\uD800-\\uDFFF escape)"
                    ) from None

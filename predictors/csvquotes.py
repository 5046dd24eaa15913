"""A csv quote never closed, found rather than read as the rest of the file in one cell.

``csv.reader`` (not strict: strict would also refuse ``"x"y``, which pyarrow and it both read as
``xy``) and pyarrow end an open quoted cell at the end of the file. A stray opening quote in a row's
last cell therefore took in every later line and the row kept its width: ``read_trace`` dropped the
rest of the file without a word (math100 with one stray quote on line 300: 299 rows of 800).
``predictors.traceio`` checks each record whose last cell holds a line break with these helpers.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator

from scheduler.trace import TraceFormatError


class LineTap:
    """The lines ``csv.reader`` pulls, those of the record being read kept in ``lines`` so that the
    record can be parsed again on its own (``quote_left_open``)."""

    def __init__(self, handle: Iterator[str]) -> None:
        self.handle = handle
        self.lines: list[str] = []

    def __iter__(self) -> LineTap:
        return self

    def __next__(self) -> str:
        line = next(self.handle)
        self.lines.append(line)
        return line


def has_line_break(text: str) -> bool:
    """Whether a cell holds a line break: only such a last cell can be a quote left open."""
    return "\n" in text or "\r" in text


def quote_left_open(lines: list[str]) -> bool:
    """Whether ``lines``, one whole csv record, end inside a quoted cell: fed one more line break, a
    closed record is followed by a blank one, while an open cell takes the break in."""
    return len(list(csv.reader([*lines, "\n"]))) == 1


def open_quote_error(source: str, line: int, header: list[str], cells: list[str]) -> TraceFormatError:
    """The error for a record opened at ``line`` whose last cell's quote is never closed."""
    last = cells[-1]
    column = header[len(cells) - 1] if len(cells) <= len(header) else f"<cell {len(cells)}>"
    shown = last.splitlines()[0] if last.strip() else last
    return TraceFormatError(
        source,
        line,
        column,
        shown,
        "opens a quote that is never closed: every line after it would be this one cell",
    )

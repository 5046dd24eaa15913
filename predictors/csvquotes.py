"""A csv record bad as a whole: a quote never closed, found rather than read as the rest of the file
in one cell, and a record of another width than the header (``width_error``).

``csv.reader`` (not strict: strict would also refuse ``"x"y``, which pyarrow and it both read as
``xy``) and pyarrow end an open quoted cell at the end of the file. A stray opening quote in a row's
last cell therefore took in every later line and the row kept its width: ``read_trace`` dropped the
rest of the file without a word (math100 with one stray quote on line 300: 299 rows of 800).
``predictors.traceio`` checks each record whose last cell holds a line break with these helpers.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator

from predictors.tracerename import FileNamedError
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


SHOWN_CELLS = 8  # of a row shown in its width's error, each cut to SHOWN_TEXT characters
SHOWN_TEXT = 40


def width_error(source: str, lines: tuple[int, int], header: list[str], cells: list[str]) -> TraceFormatError:
    """The error for a record of another width than ``header`` (the file's own names) that begins and
    ends on ``lines``: at the line it begins on, its cells shown as the value, saying how many it has,
    how many the header has and which columns it lacks. It was ``short.csv:3:plen=3: row has 3 cells,
    expected 5``: the count shown as the value of a cell the row does not have (trace56)."""
    count, width = len(cells), len(header)
    shown = [c if len(c) <= SHOWN_TEXT else c[:SHOWN_TEXT] + "..." for c in cells[:SHOWN_CELLS]]
    if count > SHOWN_CELLS:
        shown.append(f"... {count - SHOWN_CELLS} more")
    reason = f"has {count} cells where the header has {width}"
    if count < width:
        lacking = ", ".join(header[count:])
        reason += f": no cell for {lacking}"
    else:
        reason += (
            f": {count - width} past its last column, {header[-1]!r} (a cell holding ',' must be quoted)"
        )
    if lines[1] != lines[0]:
        reason += f" (the row runs on to line {lines[1]}: a quoted cell holds a line break)"
    return FileNamedError(source, lines[0], "<row>", shown, reason)

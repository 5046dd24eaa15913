"""Reading trace files (.csv, .jsonl, .parquet) into the columnar ``Trace``.

Every row goes through ``scheduler.trace.parse_row``, so one set of rules decides what a valid row is
and a malformed cell is reported as ``file:line:column``. Lines are 1-based: in csv the header is
line 1 (a quoted multi-line cell reports the line the record ends on); in jsonl the physical line;
in parquet the row number. Nothing is dropped silently: a bad row is an error, not a skip.
What makes a csv or jsonl record bad beyond its cells lives beside it (``predictors.csvquotes``,
``predictors.jsonlobjects``), and so does what a ``--map`` renaming may do (``predictors.tracerename``).
Writing is ``predictors.tracewrite``; docs/trace-format.md documents the format.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from predictors.csvquotes import LineTap, has_line_break, open_quote_error, quote_left_open, width_error
from predictors.headerhints import alias_refusal, missing_columns
from predictors.jsonlobjects import jsonl_objects
from predictors.stepgroups import repeated_rows
from predictors.tracefast import fast_trace
from predictors.tracerename import FileNamedError, Renamer, in_file_terms
from predictors.tracetable import INFINITE_FEATURE, Trace, TraceBuilder, first_infinite
from scheduler.errors import InvalidInputError
from scheduler.trace import OPTIONAL_COLUMNS, REQUIRED_COLUMNS, TraceFormatError, parse_row

SUFFIXES: tuple[str, ...] = (".csv", ".jsonl", ".parquet")
_KNOWN = frozenset(REQUIRED_COLUMNS) | frozenset(OPTIONAL_COLUMNS)

RawRows = Iterator[tuple[int, dict[str, object]]]  # (line, cells) pairs


def read_trace(path: str | Path, allow_empty: bool = False, fast: bool = True) -> Trace:
    """Read and validate a whole trace; raises ``TraceFormatError`` / ``InvalidInputError`` on bad input.

    An empty trace is an error unless ``allow_empty``: nothing downstream can use one, and saying so
    at the file is clearer than a failure three modules later. csv and parquet first try the
    vectorised path (``predictors.tracefast``), which yields the same trace or nothing; ``fast=False``
    forces the row-by-row path.
    """
    path = Path(path)
    if path.is_dir():  # before the suffix check, which would call a folder "unsupported"
        raise InvalidInputError("trace", str(path), "is a directory, not a trace file")
    rows = read_rows(path)  # refuses an unsupported suffix; nothing is read until iterated
    if not path.is_file():
        raise InvalidInputError("trace", str(path), "no such file")
    trace = _read_fast(path) if fast else None
    if trace is None:
        trace = rows_to_trace(rows, str(path))
    if len(trace) == 0 and not allow_empty:
        raise InvalidInputError("trace", str(path), "the trace has no rows")
    check_unique(trace, str(path))
    return trace


def read_renamed(path: Path, suffix: str, rename: Mapping[str, str]) -> Trace:
    """A file read as ``suffix`` with its columns renamed (``trace import``): exactly the trace, or
    error (a renamed column's in the file's names: ``in_file_terms``), of
    ``rows_to_trace(read_rows(path, suffix, rename))``, through the vectorised path where
    it applies (1M csv rows: 7.6 s instead of 46 s), as ``read_trace`` reads. Only a file whose own
    suffix is ``suffix`` takes it: pyarrow infers compression from a name (``x.gz`` read decompressed)
    where the row reader reads bytes as they are.
    """
    rows = read_rows(path, suffix, rename)
    trace = _read_fast(path, rename) if path.suffix == suffix else None
    if trace is not None:
        return trace
    try:
        return rows_to_trace(rows, str(path))
    except TraceFormatError as error:  # a renamed column's error names the file's column (learn54)
        raise in_file_terms(error, rename) from None


def check_input_file(field: str, path: Path, what: str) -> None:
    """Refuse ``path`` as a file to read when it is a folder or is missing, saying which: a folder
    was called "no such file", sending the user looking for a typo that was not there."""
    if path.is_dir():
        raise InvalidInputError(field, str(path), f"is a directory, not {what}")
    if not path.is_file():
        raise InvalidInputError(field, str(path), f"no such file (expected {what})")


def check_unique(trace: Trace, source: str) -> None:
    """One row per (step, prompt_id, sample_idx), or an ``InvalidInputError`` naming the first repeat:
    a repeat would leak its own length into its leave-one-out features, and a replay cannot play one
    trajectory twice (veRL: two dump files of one step, ``3`` and ``03``)."""
    repeated = np.flatnonzero(repeated_rows(trace))
    if len(repeated):
        i = int(repeated[0])
        step, prompt, sample = int(trace.step[i]), str(trace.prompt_id[i]), int(trace.sample_idx[i])
        message = f"holds step {step}, prompt {prompt!r}, sample {sample} twice"
        raise InvalidInputError("trace", source, message)


def read_rows(path: Path, suffix: str | None = None, rename: Mapping[str, str] | None = None) -> RawRows:
    """(line, cells) of a trace file read as ``suffix`` (default: the file's own), each column
    renamed by ``rename`` (file column -> schema column) before anything checks the header.

    Text that is not UTF-8 is an ``InvalidInputError`` naming the file and byte, like any bad cell.
    """
    reader = _reader_for(suffix or path.suffix, str(path))
    return utf8_rows(reader(path, Renamer(rename or {}, str(path))), str(path))


def utf8_rows(rows: RawRows, source: str) -> RawRows:
    """``rows``, with text that is not UTF-8 reported as an ``InvalidInputError`` naming ``source``
    (a ``UnicodeDecodeError`` is a ``ValueError`` no caller expects from a reader)."""
    try:
        yield from rows
    except UnicodeDecodeError as exc:
        found = _undecodable_at(source)
        if found is None:  # not found again (the file changed under us): no line to name
            raise InvalidInputError("trace", source, f"not UTF-8 text ({exc.reason})") from None
        line, column, reason, near = found
        raise TraceFormatError(
            source, line, "<text>", near, f"not UTF-8 text ({reason} at byte {column} of the line)"
        ) from None


def _undecodable_at(source: str) -> tuple[int, int, str, bytes] | None:
    """(line, 1-based byte within it, reason, the bytes around it) of the first bytes of ``source``
    that are not UTF-8.

    The decoder's own ``start`` counts from the 8 KiB chunk it was handed, not from any line, so it
    located nothing; a line split at ``\\n`` never cuts a UTF-8 character (no byte of one is 0x0A).
    """
    with open(source, "rb") as handle:
        for line, raw in enumerate(handle, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                return line, exc.start + 1, exc.reason, raw[max(0, exc.start - 12) : exc.end + 12]
    return None


def rows_to_trace(rows: RawRows, source: str) -> Trace:
    """Validate every row (``parse_row``) into a ``Trace``; extra cells keep their file's typing."""
    builder, where = TraceBuilder(), []
    for line, raw in rows:
        cells = _scalar_cells(raw, source, line)
        _refuse_unnamed(cells, source, line)
        row = parse_row(cells, source, line)
        builder.add(row, {k: _raw_extra(v) for k, v in cells.items() if k not in _KNOWN and _present(v)})
        where.append((source, line))
    trace = builder.build()
    refuse_infinite(trace, where)
    return trace


def refuse_infinite(trace: Trace, where: Sequence[tuple[str, int]]) -> None:
    """A ``TraceFormatError`` at the first infinite value of a numeric feature column, ``where[i]``
    being row ``i``'s (file, line) (``tracetable.INFINITE_FEATURE``). Only a numeric column's: in a
    text column ``inf`` is the word it is."""
    found = first_infinite(trace)
    if found is not None:
        column, row = found
        source, line = where[row]
        raise TraceFormatError(source, line, column, float(trace.numeric[column][row]), INFINITE_FEATURE)


def _scalar_cells(cells: dict[str, object], source: str, line: int) -> dict[str, object]:
    """``cells`` with binary text (parquet written without the UTF8 annotation) decoded, and a list,
    map or struct refused: ``str`` printed them, so ids read ``b'abc'`` and a list feature ``[1]``."""
    if not any(isinstance(v, (bytes, list, dict, tuple)) for v in cells.values()):
        return cells
    scalar = dict(cells)
    for name, value in cells.items():
        if isinstance(value, bytes):
            try:
                scalar[name] = value.decode("utf-8")
            except UnicodeDecodeError as exc:
                reason = f"not UTF-8 text ({exc.reason} at byte {exc.start + 1})"
                raise TraceFormatError(source, line, name, value, reason) from None
        elif isinstance(value, (list, dict, tuple)):
            kind = "a map or struct" if isinstance(value, dict) else "a list"
            raise TraceFormatError(source, line, name, value, f"{kind}, not a number or text")
    return scalar


def _refuse_unnamed(cells: dict[str, object], source: str, line: int) -> None:
    """Refuse a value under a blank column name: pandas' ``to_csv`` writes its index so, and it was
    kept as a feature named '' (the row number). A blank column with no value (a trailing comma)
    holds nothing to keep and reads as nothing, as any empty extra column does."""
    for position, (name, value) in enumerate(cells.items(), start=1):
        if not name.strip() and _present(value):
            reason = "a column with no name in the header holds a value (pandas writes its index so: "
            reason += "write with index=False, or name the column)"
            raise TraceFormatError(source, line, f"column {position}", value, reason)


def _read_fast(path: Path, rename: Mapping[str, str] | None = None) -> Trace | None:
    """The trace via whole-column checks after ``rename``, or None when the row-by-row path must
    decide (it alone words the errors, a refused renaming included)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if path.suffix not in (".csv", ".parquet"):
        return None
    try:
        table = pq.read_table(path) if path.suffix == ".parquet" else _csv_as_text(path)
    except (pa.ArrowException, OSError, UnicodeDecodeError, csv.Error):
        return None  # unreadable here: the row-by-row path reports it precisely
    table = None if table is None else _renamed(table, rename or {})
    if table is not None and alias_refusal(table.column_names) is not None:
        return None  # the row-by-row path refuses it, at its header
    trace = None if table is None else fast_trace(table)
    return None if trace is None or first_infinite(trace) is not None else trace  # the row path locates it


def _renamed(table: Any, rename: Mapping[str, str]) -> Any:
    """``table`` with columns renamed, or None where ``Renamer.header`` would refuse the renaming
    (a column it lacks; two columns landing on one name is left to ``fast_trace``, which refuses
    any repeated name)."""
    names = list(table.column_names)
    if any(old not in names for old in rename):
        return None
    return table.rename_columns([rename.get(name, name) for name in names]) if rename else table


def _csv_as_text(path: Path) -> Any:
    """Every column of a csv file as text (pyarrow), header names stripped; None for a file without a
    header or whose header pyarrow reads differently from ``csv``."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    with path.open(newline="", encoding="utf-8-sig") as handle:
        header = next(csv.reader(handle), None)
    if not header:
        return None
    table = pcsv.read_csv(
        path,
        parse_options=pcsv.ParseOptions(newlines_in_values=True),
        convert_options=pcsv.ConvertOptions(
            column_types={name: pa.string() for name in header},
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
        ),
    )
    if list(table.column_names) != header:
        return None
    if table.num_rows and has_line_break(str(table.column(len(header) - 1)[-1].as_py())):
        return None  # a quote maybe never closed (``predictors.csvquotes``): the row-by-row path decides
    return table.rename_columns([h.strip() for h in header])


def _reader_for(suffix: str, source: str) -> Callable[[Path, Renamer], RawRows]:
    readers = {".csv": _csv_rows, ".jsonl": _jsonl_rows, ".parquet": _parquet_rows}
    if suffix not in readers:
        raise InvalidInputError("trace", source, f"unsupported suffix; expected one of {SUFFIXES}")
    return readers[suffix]


def _present(value: object) -> bool:
    if value is None:
        return False
    if isinstance(value, float) and math.isnan(value):
        return False
    return not (isinstance(value, str) and value.strip() == "")


def _raw_extra(value: object) -> float | str:
    """An extra cell as typed by its file: numbers stay numbers, everything else is text."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return str(value).strip()


def _check_header(columns: list[str], rename: Mapping[str, str], source: str, line: int = 1) -> None:
    """Refuse a header (jsonl: the first record's keys) lacking a required column once ``rename``d,
    naming every one it lacks and the columns it has, as the file names them (``missing_columns``),
    or naming a column by another tool's name for a trace column (``_refuse_alias``)."""
    renamed = [rename.get(column, column) for column in columns]
    missing = [column for column in REQUIRED_COLUMNS if column not in renamed]
    if missing:
        raise FileNamedError(source, line, missing[0], None, missing_columns(missing, columns, rename))
    _refuse_alias(renamed, source, line)


def _refuse_alias(columns: list[str], source: str, line: int) -> None:
    """Refuse ``columns`` (a header, or a jsonl record's keys, after the renaming) naming one by another
    tool's name for a trace column (``headerhints.alias_refusal``): read as a feature, vLLM's
    ``max_tokens`` left the trace without its cap (edges60)."""
    refused = alias_refusal(columns)
    if refused is not None:
        raise FileNamedError(source, line, refused[0], None, refused[1])


# --- readers -------------------------------------------------------------------------------------

# Python's csv refuses a cell over 128 KiB, pyarrow (the fast path) reads any: a trace with a long cell
# (a prompt's text as its prompt_id) read or not depending on which path took it. Raised once, never lowered.
csv.field_size_limit(max(csv.field_size_limit(), 2**31 - 1))


def _csv_rows(path: Path, renamer: Renamer) -> RawRows:
    with path.open(newline="", encoding="utf-8-sig") as handle:  # -sig: a spreadsheet's byte-order mark
        tap = LineTap(handle)
        reader = csv.reader(tap)
        try:
            yield from _csv_records(path, reader, renamer, tap)
        except csv.Error as error:  # e.g. a cell past the field limit: a located error, not a traceback
            raise TraceFormatError(str(path), reader.line_num, "<csv>", None, str(error)) from None


def _csv_records(path: Path, reader: Any, renamer: Renamer, tap: LineTap) -> RawRows:
    """The rows of an open csv reader, the header checked first."""
    header = next(reader, None)
    if header is None:
        raise InvalidInputError("trace", str(path), "the file is empty (no header line)")
    in_file = [h.strip() for h in header]
    header = renamer.header(in_file)
    _check_header(in_file, renamer.rename, str(path))
    width = len(header)
    end, tap.lines = reader.line_num, []
    for cells in reader:
        begin, end = end + 1, reader.line_num
        lines, tap.lines = tap.lines, []
        if not cells:
            continue  # a blank line holds no row
        if has_line_break(cells[-1]) and quote_left_open(lines):
            raise open_quote_error(str(path), begin, header, cells)
        if len(cells) != width:
            raise width_error(str(path), (begin, reader.line_num), in_file, cells)
        yield reader.line_num, dict(zip(header, cells, strict=True))


def _jsonl_rows(path: Path, renamer: Renamer) -> RawRows:
    """The records of a jsonl file; the first one's keys are checked as a csv header is, so a file of
    other names is told every key to ``--map`` (a key that is there with no value is a missing value)."""
    first, seen = True, set[str]()
    for line, cells in jsonl_objects(path):
        renamed = renamer.cells(cells, line)
        if first:
            _check_header(list(cells), renamer.rename, str(path), line)
            first = False
        if not seen.issuperset(renamed):  # a key no line before held: checked as a header's column
            _refuse_alias(list(renamed), str(path), line)
            seen.update(renamed)
        yield line, renamed
    renamer.check_all_seen()


def _parquet_rows(path: Path, renamer: Renamer) -> RawRows:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several unrelated types for a corrupt file
        raise InvalidInputError("trace", str(path), f"not a readable parquet file ({exc})") from None
    names = renamer.header(list(table.column_names))
    _check_header(list(table.column_names), renamer.rename, str(path))
    columns = {
        name: table.column(old).to_pylist() for name, old in zip(names, table.column_names, strict=True)
    }
    for index in range(table.num_rows):
        yield index + 1, {name: values[index] for name, values in columns.items()}

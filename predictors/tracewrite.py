"""Writing the columnar ``Trace`` to a trace file (.csv, .jsonl, .parquet), atomically.

The file is written to a temporary name beside its target and renamed into place, so a reader
(a replay, the engine stand-in, a second import) never sees half a trace. Optional columns that no
row sets are omitted. Reading lives in ``predictors.traceio``; docs/trace-format.md documents the
format.
"""

from __future__ import annotations

import csv
import json
import math
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import numpy as np

from predictors.fsmode import make_folders, make_ordinary, remove_folders, temporary_prefix
from predictors.traceio import SUFFIXES
from predictors.tracetable import FINISH_NAMES, Trace
from scheduler.errors import InvalidInputError
from scheduler.trace import REQUIRED_COLUMNS


def write_trace(trace: Trace, path: str | Path) -> None:
    """Write a trace in the format its suffix names, atomically; optional columns never set are omitted."""
    path = Path(path)
    writer = _writer_for(path)
    made = make_folders(path.parent)  # removed again if the write fails: a refused command leaves nothing
    tmp: Path | None = None
    try:
        # a short temporary name: the target's own may be as long as the file system takes
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=temporary_prefix(path), suffix=".tmp")
        os.close(fd)
        tmp = Path(name)
        writer(trace, tmp)
        make_ordinary(tmp, replacing=path)  # an existing trace keeps its mode, as open() would
        os.replace(tmp, path)
    except BaseException:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        remove_folders(made)
        raise


def _writer_for(path: Path) -> Callable[[Trace, Path], None]:
    writers = {".csv": _write_csv, ".jsonl": _write_jsonl, ".parquet": _write_parquet}
    if path.suffix not in writers:
        raise InvalidInputError("trace", str(path), f"unsupported suffix; expected one of {SUFFIXES}")
    return writers[path.suffix]


def _record_columns(trace: Trace) -> dict[str, list[object]]:
    """Column name -> Python values (None where missing), in schema order then extras."""
    n = len(trace)
    cols: dict[str, list[object]] = {name: getattr(trace, name).tolist() for name in REQUIRED_COLUMNS}
    if np.any(trace.max_new_tokens > 0):
        cols["max_new_tokens"] = [int(v) or None for v in trace.max_new_tokens.tolist()]
    if np.any(trace.finish_reason >= 0):
        cols["finish_reason"] = [FINISH_NAMES[c] if c >= 0 else None for c in trace.finish_reason.tolist()]
    if not np.all(np.isnan(trace.reward)):
        cols["reward"] = [None if math.isnan(r) else r for r in trace.reward.tolist()]
    for name, num in trace.numeric.items():
        cols[name] = [None if math.isnan(v) else v for v in num.tolist()]
    for name, text in trace.categorical.items():
        cols[name] = [v or None for v in text.tolist()]
    assert all(len(v) == n for v in cols.values())
    return cols


def _rows_of(cols: Mapping[str, list[object]]) -> Iterator[dict[str, object]]:
    names = list(cols)
    for values in zip(*cols.values(), strict=True):
        yield dict(zip(names, values, strict=True))


def _csv_cell(value: object) -> object:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _write_csv(trace: Trace, path: Path) -> None:
    cols = _record_columns(trace)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(list(cols))
        for record in _rows_of(cols):
            writer.writerow([_csv_cell(v) for v in record.values()])


def _write_jsonl(trace: Trace, path: Path) -> None:
    cols = _record_columns(trace)
    with path.open("w", encoding="utf-8") as handle:
        for record in _rows_of(cols):
            handle.write(json.dumps({k: v for k, v in record.items() if v is not None}) + "\n")


def _write_parquet(trace: Trace, path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table(_record_columns(trace)), path)

"""A parquet trace around one typed prompt-id column, and what each read path makes of a file.

The numeric and decimal id tests hold the columnar fast read (``predictors.tracefast``) to the
row-by-row read, which reads every id cell by ``scheduler.trace.id_cell``: both need the same small
file, typed as a writer would type its id column, and one answer per path to compare.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from predictors.traceio import read_trace
from scheduler.errors import InvalidInputError


def id_parquet(path: Path, ids: list[Any], kind: pa.DataType) -> Path:
    """``path``: a parquet trace of one step whose prompt ids are ``ids``, held as a ``kind`` column
    (one sample each, every other column plain)."""
    n = len(ids)
    columns = {"step": [0] * n, "prompt_id": pa.array(ids, kind)}
    columns |= {"sample_idx": list(range(n)), "prompt_tokens": [5] * n, "output_tokens": [3] * n}
    pq.write_table(pa.table(columns), path)
    return path


def read_outcome(path: Path, fast: bool) -> object:
    """The rows one read path makes of ``path``, or its refusal's words: equal for both paths."""
    try:
        trace = read_trace(path, fast=fast)
    except InvalidInputError as exc:
        return ("error", str(exc))
    return list(trace.rows())

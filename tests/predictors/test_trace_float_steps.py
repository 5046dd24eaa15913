"""A step or sample number written as a float reads alike in every format, on both read paths: an
integral one is its integer (csv ``1e2`` and ``100.0``, jsonl ``1e2``, a parquet float column's
``100.0`` are all step 100), a fractional one (``1.5``) is refused at its cell, never rounded: a step
of 1.5 is a wrong column, and rounded it would put a row in another step's group (ids56; the rule
``scheduler.trace.int_cell`` states, which every reader goes through)."""

from __future__ import annotations

from pathlib import Path

import pytest

from predictors.traceio import read_trace
from scheduler.trace import TraceFormatError

BOTH_PATHS = pytest.mark.parametrize("fast", [True, False], ids=["fast", "rows"])
COLUMNS = ("step", "sample_idx")


def _write(path: Path, column: str, cells: list[str]) -> Path:
    """A trace of one row per cell of ``column`` (its text as written: ``1e2``, ``"x"``), others plain."""
    rows = []
    for i, cell in enumerate(cells):
        row = {"step": "0", "prompt_id": f'"p{i}"', "sample_idx": "0", "prompt_tokens": "5"}
        row["output_tokens"], row[column] = "3", cell
        rows.append(row)
    if path.suffix == ".csv":
        lines = [",".join(rows[0])] + [",".join(v.strip('"') for v in row.values()) for row in rows]
        path.write_text("\n".join(lines) + "\n")
    elif path.suffix == ".jsonl":
        path.write_text("".join("{" + ", ".join(f'"{k}": {v}' for k, v in r.items()) + "}\n" for r in rows))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = {k: [float(r[k]) if k == column else r[k].strip('"') for r in rows] for k in rows[0]}
        for name in ("step", "sample_idx", "prompt_tokens", "output_tokens"):
            if name != column:
                table[name] = [int(v) for v in table[name]]
        pq.write_table(pa.table(table), path)
    return path


@BOTH_PATHS
@pytest.mark.parametrize("column", COLUMNS)
@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_an_integral_float_reads_as_its_integer(tmp_path: Path, suffix: str, column: str, fast: bool) -> None:
    path = _write(tmp_path / f"t{suffix}", column, ["1e2", "100.0", "7", "0.7e1"])
    assert getattr(read_trace(path, fast=fast), column).tolist() == [100, 100, 7, 7]


@BOTH_PATHS
@pytest.mark.parametrize("column", COLUMNS)
@pytest.mark.parametrize(("suffix", "shown"), [(".csv", "'1.5'"), (".jsonl", "1.5"), (".parquet", "1.5")])
def test_a_fractional_float_is_refused_at_its_cell(
    tmp_path: Path, suffix: str, shown: str, column: str, fast: bool
) -> None:
    path = _write(tmp_path / f"t{suffix}", column, ["1", "1.5"])
    line = 3 if suffix == ".csv" else 2  # csv's header is line 1
    with pytest.raises(TraceFormatError) as refused:
        read_trace(path, fast=fast)
    assert str(refused.value) == f"{path}:{line}:{column}={shown}: expected an integer"

"""The vectorised reader gives exactly the row-by-row reader's trace, or error, on any file."""

from __future__ import annotations

import csv
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from predictors.synthetic import synthetic_trace
from predictors.tracefast import fast_trace
from predictors.traceio import read_trace
from predictors.tracewrite import write_trace
from scheduler.errors import InvalidInputError

INTS = ["0", "7", "12", "0012", "12.0", " 12", "-3", "", "1e3", "abc", "99999999999999999999999"]
REALS = ["1", "0.5", "-2.5e-3", ".5", "", "nan", "inf", "1_0", " 1", "x"]
TEXT = ["a", "p 1", " a", "Level 3", "", "1", "inf", "stop", "length", "\u00a0b"]
FINISH = ["stop", "length", "", " stop", "other"]
COLUMNS = {
    "step": INTS,
    "prompt_id": TEXT,
    "sample_idx": INTS,
    "prompt_tokens": INTS,
    "output_tokens": INTS,
    "max_new_tokens": INTS,
    "finish_reason": FINISH,
    "reward": REALS,
    "level": TEXT,
    "temp": REALS,
}
CLEAN = {"step": "1", "prompt_id": "p", "sample_idx": "0", "prompt_tokens": "5", "output_tokens": "7"}
CLEAN |= {"max_new_tokens": "4096", "finish_reason": "stop", "reward": "1", "level": "L1", "temp": "0.7"}


def _outcome(path: Path, fast: bool) -> object:
    try:
        trace = read_trace(path, fast=fast)
    except InvalidInputError as exc:
        return ("error", str(exc))
    return (list(trace.rows()), sorted(trace.numeric), sorted(trace.categorical))


@st.composite
def tables(draw: st.DrawFn) -> list[dict[str, str]]:
    """Mostly clean rows with a few cells drawn from tricky values."""
    rows = []
    for _ in range(draw(st.integers(1, 4))):
        row = dict(CLEAN)
        for name in draw(st.lists(st.sampled_from(sorted(COLUMNS)), max_size=2)):
            row[name] = draw(st.sampled_from(COLUMNS[name]))
        rows.append(row)
    return rows


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=tables())
def test_fast_and_row_by_row_csv_reading_agree(tmp_path: Path, rows: list[dict[str, str]]) -> None:
    path = tmp_path / "t.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(COLUMNS))
        writer.writeheader()
        writer.writerows(rows)
    assert _outcome(path, fast=True) == _outcome(path, fast=False)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=tables())
def test_fast_and_row_by_row_parquet_reading_agree(tmp_path: Path, rows: list[dict[str, str]]) -> None:
    path = tmp_path / "t.parquet"
    columns = {name: [r[name] or None for r in rows] for name in COLUMNS}
    pq.write_table(pa.table(columns), path)
    assert _outcome(path, fast=True) == _outcome(path, fast=False)


def test_well_formed_files_take_the_fast_path(tmp_path: Path, shared_data: Path) -> None:
    import pyarrow.csv as pcsv

    path = tmp_path / "t.parquet"
    write_trace(synthetic_trace("short-cot", 5, 4, 2), path)
    assert fast_trace(pq.read_table(path)) is not None
    real = pcsv.read_csv(
        shared_data / "math100_x8.trace.csv",
        convert_options=pcsv.ConvertOptions(column_types={"prompt_id": pa.string(), "level": pa.string()}),
    )
    assert fast_trace(real) is not None

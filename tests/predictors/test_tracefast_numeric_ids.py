"""A parquet trace whose prompt ids are numbers takes the fast path, and reads as the row path does.

A numeric id column is common (a dataset's integer index; pandas' float64 of an int column that held
a null) and was read row by row, about 15x slower than text ids on a million rows, only because the
fast path took text ids alone. It now reads an integer column, and a float column whose every value
is an integer up to 2**53, as the integers' digits: ``scheduler.trace.id_cell``'s rule. A column
holding what that rule refuses (NaN, an infinity, ``1.5``, a float past 2**53, a missing id) is left
to the row path, which names the cell; either way both paths give the same trace or the same error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from predictors.tracefast import fast_trace
from predictors.traceio import read_trace
from scheduler.errors import InvalidInputError
from tests.predictors.id_columns import id_parquet, read_outcome

EXACT = 2**53
INTEGERS = [0, 1, 7, -3, 2**31 - 1, 2**62, -(2**63)]
FLOATS = [0.0, -0.0, 1.0, 12.0, -3.0, float(EXACT), float(EXACT + 2), 1.5, float("nan"), float("inf"), None]
VALUES: dict[str, list[Any]] = {
    "int64": [*INTEGERS, None],
    "int32": [0, 1, -3, 2**31 - 1, None],
    "uint64": [0, 1, 2**64 - 1, None],
    "float64": FLOATS,
    "float32": FLOATS,
}


@st.composite
def id_columns(draw: st.DrawFn) -> tuple[str, list[Any]]:
    kind = draw(st.sampled_from(sorted(VALUES)))
    return kind, draw(st.lists(st.sampled_from(VALUES[kind]), min_size=1, max_size=4))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(column=id_columns())
def test_both_paths_read_a_numeric_id_column_alike(tmp_path: Path, column: tuple[str, list[Any]]) -> None:
    path = id_parquet(tmp_path / "t.parquet", column[1], pa.type_for_alias(column[0]))
    assert read_outcome(path, fast=True) == read_outcome(path, fast=False)


@pytest.mark.parametrize("kind", ["int64", "int32", "int8", "uint64"])
def test_an_integer_id_column_takes_the_fast_path_as_its_digits(tmp_path: Path, kind: str) -> None:
    ids = [0, 1, 7, 100] if kind.startswith("u") else [0, 1, -3, 100]
    table = pq.read_table(id_parquet(tmp_path / "t.parquet", ids, pa.type_for_alias(kind)))
    trace = fast_trace(table)
    assert trace is not None
    assert trace.prompt_id.tolist() == [str(i) for i in ids]
    assert list(trace.rows()) == list(read_trace(tmp_path / "t.parquet", fast=False).rows())


@pytest.mark.parametrize("kind", ["float64", "float32"])
def test_an_integral_float_id_column_takes_the_fast_path_as_its_integers(tmp_path: Path, kind: str) -> None:
    path = id_parquet(tmp_path / "t.parquet", [1.0, -0.0, -3.0, float(EXACT)], pa.type_for_alias(kind))
    table = pq.read_table(path)
    trace = fast_trace(table)
    assert trace is not None
    assert trace.prompt_id.tolist() == ["1", "0", "-3", str(EXACT)]
    assert list(trace.rows()) == list(read_trace(tmp_path / "t.parquet", fast=False).rows())


@pytest.mark.parametrize(
    ("kind", "bad"),
    [
        ("float64", 1.5),
        ("float64", float("nan")),
        ("float64", float("inf")),
        ("float64", float(EXACT + 2)),
        ("float64", None),
        ("int64", None),
    ],
    ids=["fraction", "nan", "infinity", "past-2**53", "missing-float", "missing-int"],
)
def test_an_id_the_rule_refuses_is_left_to_the_row_path(tmp_path: Path, kind: str, bad: object) -> None:
    path = id_parquet(tmp_path / "t.parquet", [1, bad], pa.type_for_alias(kind))
    assert fast_trace(pq.read_table(path)) is None
    with pytest.raises(InvalidInputError, match=r"t\.parquet:2:prompt_id"):
        read_trace(path)

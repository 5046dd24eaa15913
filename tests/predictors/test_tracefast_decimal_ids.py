"""A parquet trace whose prompt ids are a decimal column of integers takes the fast path too.

A decimal id column (a database export's ``NUMERIC``, ``DECIMAL(12, 0)`` or an integral ``DECIMAL(10,
2)``) reads by ``scheduler.trace.id_cell``'s rule as the integers' digits, ``1.00`` as ``'1'``, but
went row by row, ~20x slower on a million rows, because the fast path took text, integer and float
id columns alone. It now takes a decimal column whose every value is an integer (a cast to scale 0
that loses nothing), at any precision; a fraction or a missing id is left to the row path, which
names the cell. Either way both paths give the same trace or the same error.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from predictors.tracefast import fast_trace
from predictors.traceio import read_trace
from scheduler.errors import InvalidInputError
from tests.predictors.id_columns import id_parquet, read_outcome

KINDS = {
    "decimal(12,0)": pa.decimal128(12, 0),
    "decimal(10,2)": pa.decimal128(10, 2),
    "decimal(38,0)": pa.decimal128(38, 0),
    "decimal256(50,3)": pa.decimal256(50, 3),
}
VALUES = [Decimal(v) for v in ("0", "1", "-3", "100", "1.00", "-0.00", "1.50", "0.01")] + [None]


@st.composite
def id_columns(draw: st.DrawFn) -> tuple[pa.DataType, list[Decimal | None]]:
    kind = KINDS[draw(st.sampled_from(sorted(KINDS)))]
    values = [v for v in VALUES if v is None or kind.scale > 0 or v == v.to_integral_value()]
    return kind, draw(st.lists(st.sampled_from(values), min_size=1, max_size=4))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(column=id_columns())
def test_both_paths_read_a_decimal_id_column_alike(
    tmp_path: Path, column: tuple[pa.DataType, list[Decimal | None]]
) -> None:
    path = id_parquet(tmp_path / "t.parquet", column[1], column[0])
    assert read_outcome(path, fast=True) == read_outcome(path, fast=False)


@pytest.mark.parametrize(
    ("kind", "ids", "digits"),
    [
        ("decimal(12,0)", ["0", "1", "-3", "100"], ["0", "1", "-3", "100"]),
        ("decimal(10,2)", ["1.00", "-3.00", "100.00", "-0.00"], ["1", "-3", "100", "0"]),
        ("decimal(38,0)", [str(10**37), "7"], [str(10**37), "7"]),
        ("decimal256(50,3)", [f"{10**45}.000", "-2.000"], [str(10**45), "-2"]),
    ],
)
def test_an_integral_decimal_id_column_takes_the_fast_path_as_its_digits(
    tmp_path: Path, kind: str, ids: list[str], digits: list[str]
) -> None:
    path = id_parquet(tmp_path / "t.parquet", [Decimal(i) for i in ids], KINDS[kind])
    trace = fast_trace(pq.read_table(path))
    assert trace is not None
    assert trace.prompt_id.tolist() == digits
    assert list(trace.rows()) == list(read_trace(path, fast=False).rows())


@pytest.mark.parametrize(("bad", "why"), [(Decimal("1.50"), "integer"), (None, "missing")])
def test_a_decimal_id_the_rule_refuses_is_left_to_the_row_path(tmp_path: Path, bad: object, why: str) -> None:
    path = id_parquet(tmp_path / "t.parquet", [Decimal("1.00"), bad], KINDS["decimal(10,2)"])
    assert fast_trace(pq.read_table(path)) is None
    with pytest.raises(InvalidInputError, match=rf"t\.parquet:2:prompt_id.*{why}"):
        read_trace(path)


def test_a_decimal_feature_beside_decimal_ids_reads_as_the_row_path_reads_it(tmp_path: Path) -> None:
    path = id_parquet(tmp_path / "t.parquet", [Decimal("1.00"), Decimal("2.00")], KINDS["decimal(10,2)"])
    table = pq.read_table(path)
    pq.write_table(table.append_column("level", pa.array([Decimal("3.00"), None], pa.decimal128(4, 2))), path)
    assert read_outcome(path, fast=True) == read_outcome(path, fast=False)
    [first, second] = read_trace(path).rows()
    assert (first.prompt_id, first.features, second.features) == ("1", {"level": 3.0}, {})

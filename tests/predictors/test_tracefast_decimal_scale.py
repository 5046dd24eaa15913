"""A decimal id column whose every digit is a fraction's (``decimal(4,4)``: scale equal to precision)
reads alike on both paths, as ``scheduler.trace.id_cell`` reads each cell: its zeros are the id
``'0'``, on the fast path too, and a fraction is refused at its row. Such a column is one of the
decimal types a database export may write; its integers have no digit at all, so the cast to whole
numbers keeps the column's own precision rather than counting the integer digits left."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from predictors.tracefast import fast_trace
from predictors.traceio import read_trace
from scheduler.errors import InvalidInputError
from tests.predictors.id_columns import id_parquet, read_outcome

KINDS = [pa.decimal128(4, 4), pa.decimal256(40, 40)]


@pytest.mark.parametrize("kind", KINDS, ids=str)
def test_zeros_in_a_decimal_column_of_no_integer_digit_are_the_id_0_on_both_paths(
    tmp_path: Path, kind: pa.DataType
) -> None:
    path = id_parquet(tmp_path / "t.parquet", [Decimal("0"), Decimal("-0")], kind)
    trace = fast_trace(pq.read_table(path))
    assert trace is not None
    assert trace.prompt_id.tolist() == ["0", "0"]
    assert read_outcome(path, fast=True) == read_outcome(path, fast=False)


@pytest.mark.parametrize("kind", KINDS, ids=str)
def test_a_fraction_in_it_is_refused_at_its_row(tmp_path: Path, kind: pa.DataType) -> None:
    path = id_parquet(tmp_path / "t.parquet", [Decimal("0"), Decimal("0.5")], kind)
    assert fast_trace(pq.read_table(path)) is None
    with pytest.raises(InvalidInputError, match=r"t\.parquet:2:prompt_id.*integer"):
        read_trace(path)

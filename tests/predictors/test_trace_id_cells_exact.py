"""A prompt id reads as one id in every format, to its last digit and without the blanks around it.

``scheduler.trace.id_cell``'s rule (ids56) read a parquet float id column as its integers and refuses a
float past 2**53, which may be another integer rounded. A decimal column is exact at any size, so the
limit is a float's alone: a decimal id past 2**53 is the integer written, not refused. A text id is
the text without the blanks around it (a csv cell written ``" p1"``, a jsonl string with a trailing
space), in every format: the same prompt under ``'p1'`` and ``' p1'`` splits its history.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from predictors.traceio import read_trace

PAST_FLOATS = 2**53 + 1  # the first integer a float64 cannot hold


def test_a_parquet_decimal_id_past_2_53_reads_as_the_integer_written(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = [Decimal(PAST_FLOATS), Decimal(-PAST_FLOATS), Decimal(10**30)]
    rest = {"step": [0] * 3, "sample_idx": [0] * 3, "prompt_tokens": [5] * 3, "output_tokens": [3] * 3}
    pq.write_table(
        pa.table({"prompt_id": pa.array(ids, pa.decimal128(38, 0)), **rest}), tmp_path / "t.parquet"
    )
    assert read_trace(tmp_path / "t.parquet").prompt_id.tolist() == [
        str(PAST_FLOATS),
        str(-PAST_FLOATS),
        str(10**30),
    ]


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "rows"])
def test_a_csv_id_with_blanks_around_it_is_the_id_without_them(tmp_path: Path, fast: bool) -> None:
    path = tmp_path / "t.csv"
    path.write_text('step,prompt_id,sample_idx,prompt_tokens,output_tokens\n0," p1 ",0,5,3\n0,p2\t,0,5,3\n')
    assert read_trace(path, fast=fast).prompt_id.tolist() == ["p1", "p2"]


def test_a_jsonl_id_with_blanks_around_it_is_the_id_without_them(tmp_path: Path) -> None:
    rows = [{"step": 0, "prompt_id": " p1 ", "sample_idx": 0, "prompt_tokens": 5, "output_tokens": 3}]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert read_trace(tmp_path / "t.jsonl").prompt_id.tolist() == ["p1"]


def test_a_parquet_text_id_with_blanks_around_it_is_the_id_without_them(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rest = {"step": [0, 0], "sample_idx": [0, 0], "prompt_tokens": [5, 5], "output_tokens": [3, 3]}
    pq.write_table(pa.table({"prompt_id": [" p1", "p2 "], **rest}), tmp_path / "t.parquet")
    assert read_trace(tmp_path / "t.parquet").prompt_id.tolist() == ["p1", "p2"]


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "rows"])
def test_a_negative_parquet_float_id_past_2_53_is_refused_at_its_row_on_either_path(
    tmp_path: Path, fast: bool
) -> None:
    """The limit is on the magnitude: -(2**53 + 2) may be another negative integer rounded as well."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from scheduler.trace import TraceFormatError

    rest = {"step": [0, 0], "sample_idx": [0, 0], "prompt_tokens": [5, 5], "output_tokens": [3, 3]}
    ids = pa.array([1.0, -float(2**53 + 2)], pa.float64())
    pq.write_table(pa.table({"prompt_id": ids, **rest}), tmp_path / "t.parquet")
    with pytest.raises(TraceFormatError, match=r"t\.parquet:2:prompt_id=.*: a float id past 2\*\*53"):
        read_trace(tmp_path / "t.parquet", fast=fast)

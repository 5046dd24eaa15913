"""One prompt, one id, whatever file format it came in (ids56).

The rule: a prompt id written as a number (jsonl, a parquet column) is an integer's id and reads as
the integer's digits: ``1``, ``1.0``, ``1e0`` and a decimal ``1.0`` are all ``'1'``. Text is the id as
written: a csv cell is always text, and so is a string in jsonl or parquet, so a trace this project
wrote reads back unchanged. What a number cannot be is refused at its cell: ``1.5`` (a column of reals
taken for the ids), NaN (a missing value), an infinity, a float past 2**53 (maybe another integer
rounded). A parquet float id column, which pandas makes of an int column holding a null, read ``'1.0'``
where jsonl's ``1`` read ``'1'``: the same prompt under two ids across steps, and the predictor's
history of it split, so the next epoch's prediction had none.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from predictors.history import History
from predictors.traceio import read_trace
from predictors.tracetable import Trace
from predictors.tracewrite import write_trace
from scheduler.trace import TraceFormatError

ROW = {"sample_idx": 0, "prompt_tokens": 5, "output_tokens": 3}
BOTH_PATHS = pytest.mark.parametrize("fast", [True, False], ids=["fast", "rows"])


def _jsonl(path: Path, ids: list[str], step: int = 0) -> Path:
    """A jsonl trace whose ``prompt_id`` values are the JSON literals ``ids`` (``1.0``, ``"a"``)."""
    rest = '"sample_idx": 0, "prompt_tokens": 5, "output_tokens": 3'
    lines = [f'{{"step": {step}, "prompt_id": {raw}, {rest}}}' for raw in ids]
    path.write_text("\n".join(lines) + "\n")
    return path


def _parquet(path: Path, ids: list[Any], kind: Any = None, step: int = 0) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = len(ids)
    columns = {name: [value] * n for name, value in ROW.items()}
    pq.write_table(pa.table({"step": [step] * n, "prompt_id": pa.array(ids, kind), **columns}), path)
    return path


@BOTH_PATHS
@pytest.mark.parametrize("kind", ["float64", "float32"])
def test_a_parquet_float_id_column_reads_as_its_integers(tmp_path: Path, kind: str, fast: bool) -> None:
    import pyarrow as pa

    path = _parquet(tmp_path / "t.parquet", [1.0, 2.0, -0.0, 9007199254740992.0], pa.type_for_alias(kind))
    assert read_trace(path, fast=fast).prompt_id.tolist() == ["1", "2", "0", "9007199254740992"]


def test_a_parquet_decimal_id_column_reads_as_its_integers(tmp_path: Path) -> None:
    import pyarrow as pa

    path = _parquet(tmp_path / "t.parquet", [Decimal("1.0"), Decimal("20.00")], pa.decimal128(6, 2))
    assert read_trace(path).prompt_id.tolist() == ["1", "20"]


@pytest.mark.parametrize("literal", ["1", "1.0", "1e0", "1.000", "10e-1"])
def test_a_jsonl_number_id_reads_as_its_integers_digits(tmp_path: Path, literal: str) -> None:
    assert read_trace(_jsonl(tmp_path / "t.jsonl", [literal])).prompt_id.tolist() == ["1"]


def test_text_ids_are_kept_as_written_in_every_format(tmp_path: Path) -> None:
    ids = ["1.0", "007", "1e2", "1.5", "nan", "-0"]
    (tmp_path / "t.csv").write_text(
        "step,prompt_id,sample_idx,prompt_tokens,output_tokens\n" + "".join(f"0,{i},0,5,3\n" for i in ids)
    )
    _jsonl(tmp_path / "t.jsonl", [json.dumps(i) for i in ids])
    _parquet(tmp_path / "t.parquet", ids)
    for name in ("t.csv", "t.jsonl", "t.parquet"):
        for fast in (True, False):
            assert read_trace(tmp_path / name, fast=fast).prompt_id.tolist() == ids, (name, fast)


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_a_trace_this_project_wrote_reads_back_with_its_ids_unchanged(tmp_path: Path, suffix: str) -> None:
    ids = ["1.0", "1", "007", "2.5", "p 1"]
    trace = read_trace(_jsonl(tmp_path / "src.jsonl", [json.dumps(i) for i in ids]))
    write_trace(trace, tmp_path / f"out{suffix}")
    assert read_trace(tmp_path / f"out{suffix}").prompt_id.tolist() == ids


def test_one_prompt_keeps_its_history_across_a_parquet_step_and_a_jsonl_step(tmp_path: Path) -> None:
    step0 = read_trace(_parquet(tmp_path / "0.parquet", [1.0, 2.0], step=0))
    step1 = read_trace(_jsonl(tmp_path / "1.jsonl", ["1", "2"], step=1))
    stats = History(Trace.concat([step0, step1])).stats_before(1)
    assert stats.positions(step1.prompt_id.tolist()).tolist() == [0, 1]  # both prompts have a history


@pytest.mark.parametrize(
    ("literal", "shown", "reason"),
    [
        ("1.5", "1.5", "a number as an id must be an integer (a column of reals taken for the ids?)"),
        ("NaN", "nan", "required value is missing (NaN: a missing value, as pandas writes one)"),
        ("Infinity", "inf", "an infinite number is no id"),
        (
            "1.152921504606847e18",
            "1.152921504606847e+18",
            "a float id past 2**53 may be another integer rounded: write the ids as integers or text",
        ),
    ],
)
def test_a_jsonl_number_that_is_no_id_is_refused_at_its_line(
    tmp_path: Path, literal: str, shown: str, reason: str
) -> None:
    path = _jsonl(tmp_path / "t.jsonl", ['"a"', literal])
    with pytest.raises(TraceFormatError) as refused:
        read_trace(path)
    assert str(refused.value) == f"{path}:2:prompt_id={shown}: {reason}"


@BOTH_PATHS
@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (1.5, "must be an integer"),
        (float("nan"), r"required value is missing \(NaN"),
        (float("inf"), "an infinite number is no id"),
        (2.0**60, "past 2\\*\\*53"),
    ],
)
def test_a_parquet_float_that_is_no_id_is_refused_at_its_row(
    tmp_path: Path, value: float, reason: str, fast: bool
) -> None:
    path = _parquet(tmp_path / "t.parquet", [1.0, value])
    with pytest.raises(TraceFormatError, match=rf"t\.parquet:2:prompt_id=.*: .*{reason}"):
        read_trace(path, fast=fast)


def test_a_parquet_decimal_id_with_a_fraction_is_refused(tmp_path: Path) -> None:
    import pyarrow as pa

    path = _parquet(tmp_path / "t.parquet", [Decimal("1.0"), Decimal("1.5")], pa.decimal128(4, 1))
    with pytest.raises(TraceFormatError, match=r"t\.parquet:2:prompt_id=1\.5: a number as an id must be"):
        read_trace(path)

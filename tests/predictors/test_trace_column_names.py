"""A trace's header as spreadsheets and pandas write it: an unnamed column of values and a file
separated by something other than commas are errors that say so, not a feature or a missing column."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from predictors.traceio import read_trace
from scheduler.trace import TraceFormatError

HEADER = "step,prompt_id,sample_idx,prompt_tokens,output_tokens"


@pytest.mark.parametrize("fast", [True, False])
def test_a_column_without_a_name_holding_values_is_refused_not_kept_as_a_feature(
    tmp_path: Path, fast: bool
) -> None:
    # pandas' to_csv writes its index first under a blank name: it was kept as a numeric feature
    # named '' (the row number), which every trace written from it carried on.
    path = tmp_path / "pandas.csv"
    path.write_text(f",{HEADER}\n1,0,a,0,10,5\n2,1,a,0,10,6\n")
    with pytest.raises(TraceFormatError) as info:
        read_trace(path, fast=fast)
    assert (info.value.line, info.value.column) == (2, "column 1")
    assert "no name" in str(info.value)
    assert "index=False" in str(info.value)


def test_a_jsonl_key_that_is_blank_is_refused_as_an_unnamed_column(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    cells = {"step": 0, "prompt_id": "a", "sample_idx": 0, "prompt_tokens": 10, "output_tokens": 5, " ": 3}
    path.write_text(json.dumps(cells) + "\n")
    with pytest.raises(TraceFormatError, match="no name") as info:
        read_trace(path)
    assert info.value.line == 1


@pytest.mark.parametrize("fast", [True, False])
def test_a_trailing_comma_leaves_an_empty_unnamed_column_that_is_read_as_nothing(
    tmp_path: Path, fast: bool
) -> None:
    path = tmp_path / "trailing.csv"
    path.write_text(f"{HEADER},\n0,a,0,10,5,\n")
    trace = read_trace(path, fast=fast)
    assert trace.output_tokens.tolist() == [5]
    assert dict(trace.numeric) == {}
    assert dict(trace.categorical) == {}


@pytest.mark.parametrize("separator", [";", "\t", "|"])
def test_a_file_separated_by_another_character_is_told_so_not_sent_to_map_a_column(
    tmp_path: Path, separator: str
) -> None:
    # A ';'-separated export (a spreadsheet in a comma-decimal locale) read as one column named
    # 'step;prompt_id;...' and was refused as "step: required column is missing (import it with
    # --map step=COLUMN)": the user went looking for a column name.
    path = tmp_path / "export.csv"
    path.write_text(HEADER.replace(",", separator) + "\n" + separator.join("0a0105") + "\n")
    with pytest.raises(TraceFormatError) as info:
        read_trace(path)
    assert info.value.line == 1
    assert f"separated by {separator!r}" in str(info.value)
    assert "--map" not in str(info.value)


@pytest.mark.parametrize("fast", [True, False])
def test_a_required_column_named_in_another_case_is_pointed_at(tmp_path: Path, fast: bool) -> None:
    # An export with "Step" (a W&B table, a spreadsheet) was told only "step: required column is
    # missing (import it with --map step=COLUMN)", the column it had left for the user to spot.
    path = tmp_path / "export.csv"
    path.write_text("Step,prompt_id,sample_idx,prompt_tokens,output_tokens\n0,a,0,10,5\n")
    with pytest.raises(TraceFormatError) as info:
        read_trace(path, fast=fast)
    assert (info.value.line, info.value.column) == (1, "step")
    assert "the header has 'Step'" in str(info.value)
    assert "--map step=Step" in str(info.value)


def test_a_parquet_column_named_with_a_trailing_blank_is_pointed_at_without_a_map_that_cannot_work(
    tmp_path: Path,
) -> None:
    # --map strips its names, so "--map step=step " would name a column 'step' the file lacks.
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    columns = {
        "step ": [0],
        "prompt_id": ["a"],
        "sample_idx": [0],
        "prompt_tokens": [10],
        "output_tokens": [5],
    }
    pq.write_table(pa.table(columns), path)
    with pytest.raises(TraceFormatError, match=r"the header has 'step ': rename it\)$"):
        read_trace(path)

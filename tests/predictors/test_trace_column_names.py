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


def _other_names(tmp_path: Path, suffix: str) -> Path:
    """One row of a trace whose columns carry a training framework's names, not the schema's."""
    row = {"epoch": 0, "uid": "a", "k": 0, "prompt_len": 10, "response_len": 5, "level": "Level 3"}
    path = tmp_path / f"runs{suffix}"
    if suffix == ".csv":
        path.write_text(",".join(row) + "\n" + ",".join(str(v) for v in row.values()) + "\n")
    elif suffix == ".jsonl":
        path.write_text(json.dumps(row) + "\n")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({name: [value] for name, value in row.items()}), path)
    return path


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_a_trace_of_other_column_names_is_told_every_missing_column_and_the_ones_it_has(
    tmp_path: Path, suffix: str
) -> None:
    # it was refused one column a run ("step=None: required column is missing (import it with --map
    # step=COLUMN)", then prompt_id, ...), in jsonl with no --map hint at all ("required value is
    # missing"), and the user read the header themselves to find the columns to map
    with pytest.raises(TraceFormatError) as info:
        read_trace(_other_names(tmp_path, suffix))
    assert (info.value.line, info.value.column) == (1, "step")
    assert str(info.value).endswith(
        "step=None: required column is missing (import it with trace import --map step=COLUMN); missing "
        "too: "
        "prompt_id, sample_idx, prompt_tokens, output_tokens; the columns it has: 'epoch', 'uid', 'k', "
        "'prompt_len', 'response_len', 'level'"
    )


def test_a_jsonl_first_line_with_a_required_key_null_is_a_missing_value_not_a_missing_column(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.jsonl"
    cells = {"step": None, "prompt_id": "a", "sample_idx": 0, "prompt_tokens": 10, "output_tokens": 5}
    path.write_text(json.dumps(cells) + "\n")
    with pytest.raises(TraceFormatError, match=r"step=None: required value is missing$"):
        read_trace(path)


def test_a_wide_header_of_other_names_is_listed_by_its_first_twelve_columns_and_a_count_of_the_rest(
    tmp_path: Path,
) -> None:
    # a dump of twenty framework columns: one line to pick from, not the whole header
    names = [f"col{i}" for i in range(20)]
    path = tmp_path / "wide.csv"
    path.write_text(",".join(names) + "\n" + ",".join("0" for _ in names) + "\n")
    with pytest.raises(TraceFormatError) as info:
        read_trace(path)
    shown = ", ".join(repr(name) for name in names[:12])
    assert str(info.value).endswith(f"the columns it has: {shown} and 8 more")


def test_a_missing_column_the_header_holds_under_another_tools_name_is_pointed_at(tmp_path: Path) -> None:
    # veRL's 'response_length' was listed among the columns, and the hint said --map output_tokens=COLUMN
    path = tmp_path / "verl_lengths.csv"
    path.write_text("step,prompt_id,sample_idx,prompt_tokens,response_length\n1,a,0,10,5\n")
    with pytest.raises(TraceFormatError) as info:
        read_trace(path)
    assert str(info.value) == (
        f"{path}:1:output_tokens=None: required column is missing (the header has 'response_length', veRL's "
        "name for the output length: import it with trace import --map output_tokens=response_length); the "
        "columns it has: 'step', 'prompt_id', 'sample_idx', 'prompt_tokens', 'response_length'"
    )

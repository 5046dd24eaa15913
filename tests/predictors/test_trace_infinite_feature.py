"""An infinite number in a numeric feature column is an error at its cell, in every trace file and
every reader: ``POST /actuals`` and the service's history refuse one ("Input should be a finite
number"), where a trace took it, trained on it, wrote it to jsonl as ``Infinity`` and failed only at
``trace push``, at a row index no editor shows (trace56). NaN stays a missing value; ``inf`` in a
text column is the word."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from predictors.traceio import read_trace
from scheduler.trace import TraceFormatError
from service.traceimport.importers import import_generic, import_verl, parse_mapping
from tests.service.traceimport.wordtokenizer import write_word_tokenizer

HEADER = "step,prompt_id,sample_idx,prompt_tokens,output_tokens"
REASON = "an infinite number: a feature is text or a finite number, as POST /actuals takes one"


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("cell", ["inf", "-Infinity", "1e999"])
def test_an_infinite_csv_feature_is_refused_at_its_line_on_either_path(
    tmp_path: Path, fast: bool, cell: str
) -> None:
    path = tmp_path / "t.csv"
    path.write_text(f"{HEADER},pace,level\n0,a,0,5,3,1.5,x\n0,b,0,5,3,,y\n\n0,c,0,5,3,{cell},inf\n")
    with pytest.raises(TraceFormatError) as refused:
        read_trace(path, fast=fast)
    value = "-inf" if cell.startswith("-") else "inf"
    assert str(refused.value) == f"{path}:5:pace={value}: {REASON}"


def test_an_infinite_parquet_feature_is_refused_at_its_row(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    rows = {"step": [0, 0], "prompt_id": ["a", "b"], "sample_idx": [0, 0], "prompt_tokens": [5, 5]}
    pq.write_table(
        pa.table({**rows, "output_tokens": [3, 4], "z": [1.0, 2.0], "f": [0.5, float("inf")]}), path
    )
    with pytest.raises(TraceFormatError) as refused:
        read_trace(path)
    assert str(refused.value) == f"{path}:2:f=inf: {REASON}"


def test_a_jsonl_feature_of_infinity_is_refused_and_nan_stays_a_missing_value(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    row = {"step": 0, "prompt_id": "a", "sample_idx": 0, "prompt_tokens": 5, "output_tokens": 3}
    path.write_text(
        json.dumps({**row, "f": 1.0}) + "\n" + json.dumps({**row, "sample_idx": 1, "f": float("nan")})
    )
    assert str(read_trace(path).numeric["f"].tolist()) == "[1.0, nan]"
    path.write_text(
        json.dumps({**row, "f": 1.0}) + "\n" + json.dumps({**row, "sample_idx": 1, "f": 1e400}) + "\n"
    )
    with pytest.raises(TraceFormatError, match=rf"t\.jsonl:2:f=inf: {REASON}$"):
        read_trace(path)


def test_inf_in_a_text_column_is_the_word(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(f"{HEADER},word\n0,a,0,5,3,inf\n0,b,0,5,3,nan\n0,c,0,5,3,finite\n")
    assert read_trace(path).categorical["word"].tolist() == ["inf", "nan", "finite"]


def test_a_mapped_infinite_feature_is_named_as_the_file_names_it_by_the_import_command(
    cli: typer.Typer, tmp_path: Path
) -> None:
    path = tmp_path / "runs.csv"
    path.write_text("epoch,prompt_id,sample_idx,prompt_tokens,output_tokens,ratio\n0,a,0,5,3,inf\n")
    out = tmp_path / "trace.jsonl"
    args = ["trace", "import", str(path), "--from", "csv", "--map", "step=epoch", "--map", "speed=ratio"]
    result = CliRunner().invoke(cli, [*args, "--out", str(out)])
    assert (result.exit_code, result.stderr) == (
        2,
        f"trace: {path}:2:ratio=inf: as speed (--map speed=ratio): {REASON}\n",
    )
    assert not out.exists()
    with pytest.raises(TraceFormatError, match="ratio=inf"):
        import_generic(path, "csv", parse_mapping(["step=epoch", "speed=ratio"]))


def test_a_kept_verl_field_of_infinity_is_refused_at_its_dump_line(tmp_path: Path) -> None:
    tokenizer = write_word_tokenizer(tmp_path / "tokenizer.json", ["[UNK]", "two", "four"])
    folder = tmp_path / "d"
    folder.mkdir()
    lines = [{"input": "two", "output": "four", "score": 1.0, "pace": p} for p in (1.0, 2.0, float("inf"))]
    (folder / "3.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(TraceFormatError) as refused:
        import_verl(folder, tokenizer, max_new_tokens=None, keep=["pace"])
    assert str(refused.value) == f"{folder / '3.jsonl'}:3:pace=inf: {REASON}"

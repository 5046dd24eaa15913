"""A boolean is no prompt id: a jsonl ``true`` or a parquet bool column as ``prompt_id`` (a flag column
written or ``--map``'d as the id) is an error at its cell, as a boolean count is. It was read as the
text ``True``: every row of a step fell into two "prompts", refused only as a repeated key where the
samples' numbers met, or taken whole where they did not (trace56)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from predictors.traceio import read_trace
from scheduler.trace import TraceFormatError
from service.traceimport.importers import import_generic, parse_mapping

ROW = {"step": 0, "sample_idx": 0, "prompt_tokens": 5, "output_tokens": 3}


def test_a_boolean_prompt_id_in_jsonl_is_refused_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(
        json.dumps({**ROW, "prompt_id": "a"}) + "\n" + json.dumps({**ROW, "prompt_id": True}) + "\n"
    )
    with pytest.raises(TraceFormatError) as refused:
        read_trace(path)
    assert str(refused.value) == f"{path}:2:prompt_id=True: expected text or a number, got a boolean"


def test_a_boolean_prompt_id_column_in_parquet_is_refused_at_its_first_row(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    columns = {name: [value, value] for name, value in ROW.items()}
    pq.write_table(pa.table({**columns, "sample_idx": [0, 1], "prompt_id": [False, True]}), path)
    with pytest.raises(TraceFormatError, match=r"t\.parquet:1:prompt_id=False: expected text or a number"):
        read_trace(path)


def test_a_flag_column_mapped_as_the_prompt_id_is_named_as_the_file_names_it(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps({**ROW, "uid": "a", "correct": True}) + "\n")
    with pytest.raises(TraceFormatError) as refused:
        import_generic(path, "jsonl", parse_mapping(["prompt_id=correct"]))
    assert str(refused.value) == (
        f"{path}:1:correct=True: as prompt_id (--map prompt_id=correct): "
        "expected text or a number, got a boolean"
    )


def test_text_and_number_ids_are_read_as_before(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(
        json.dumps({**ROW, "prompt_id": 7}) + "\n" + json.dumps({**ROW, "prompt_id": "True"}) + "\n"
    )
    assert read_trace(path).prompt_id.tolist() == ["7", "True"]

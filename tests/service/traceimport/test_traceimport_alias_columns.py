"""A trace file whose column carries another tool's name for a trace column (vLLM's ``max_tokens``,
veRL's ``response_length``, ``completion_tokens``, ``score``) is refused by every reader, naming the
trace's column and the ``--map`` that imports it as that column; beside the trace's own column, it is
refused naming that column. It was read as a feature of that name: a file's cap was no cap (an output
past it read without a word), and ``completion_tokens`` handed the predictor the length it predicts.
A ``--map`` onto such a name was already refused (edges59); a file that simply has the column was not
(edges60). Renamed by ``--map`` onto the trace's column, or onto a name of the user's own, it reads.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import typer
from typer.testing import CliRunner

from predictors.traceio import read_rows, read_trace, rows_to_trace
from scheduler.errors import InvalidInputError
from scheduler.trace import TraceFormatError
from service.traceimport.importers import import_generic, import_verl, parse_mapping

HEADER = ["step", "prompt_id", "sample_idx", "prompt_tokens", "output_tokens"]
KEEP = "a feature may not carry another tool's name for a trace column; to keep it as one: "


def _write(path: Path, header: list[str], rows: list[list[object]]) -> Path:
    """``rows`` under ``header`` in the format ``path``'s suffix names."""
    if path.suffix == ".csv":
        lines: list[Sequence[object]] = [header, *rows]
        path.write_text("".join(",".join(str(c) for c in cells) + "\n" for cells in lines))
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(dict(zip(header, row, strict=True))) + "\n" for row in rows))
    else:
        pq.write_table(pa.table({name: [row[i] for row in rows] for i, name in enumerate(header)}), path)
    return path


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_a_file_naming_its_cap_max_tokens_is_refused_naming_the_map_that_imports_it(
    tmp_path: Path, suffix: str, fast: bool
) -> None:
    # the output, 30 tokens, is past the cap of 8: read as a feature, the cap was never checked
    path = _write(tmp_path / f"runs{suffix}", [*HEADER, "max_tokens"], [[0, "a", 0, 5, 30, 8]])
    with pytest.raises(TraceFormatError) as refused:
        read_trace(path, fast=fast)
    assert str(refused.value) == (
        f"{path}:1:max_tokens=None: 'max_tokens' is vLLM's and OpenAI's name for the cap; the trace's "
        "column is 'max_new_tokens': import it with trace import --map max_new_tokens=max_tokens "
        f"({KEEP}trace import --map NAME=max_tokens)"
    )


@pytest.mark.parametrize(
    ("name", "column", "whose"),
    [
        ("completion_tokens", "output_tokens", "vLLM's and OpenAI's name for the output length (usage)"),
        ("Prompt_Length", "prompt_tokens", "veRL's name for the prompt length"),
    ],
)
def test_one_beside_the_trace_column_it_names_is_refused_naming_that_column(
    tmp_path: Path, name: str, column: str, whose: str
) -> None:
    path = _write(tmp_path / "runs.csv", [*HEADER, name], [[0, "a", 0, 5, 30, 30]])
    with pytest.raises(TraceFormatError) as refused:
        read_trace(path)
    assert str(refused.value) == (
        f"{path}:1:{name}=None: {name!r} is {whose}, beside the trace's own {column!r}: leave it out of "
        f"the file ({KEEP}trace import --map NAME={name})"
    )


def test_a_jsonl_key_only_a_later_line_holds_is_refused_at_that_line(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    first = dict(zip(HEADER, [0, "a", 0, 5, 30], strict=True))
    path.write_text(json.dumps(first) + "\n" + json.dumps({**first, "sample_idx": 1, "score": 1.0}) + "\n")
    with pytest.raises(TraceFormatError) as refused:
        read_trace(path)
    assert (refused.value.line, refused.value.column) == (2, "score")
    assert "'score' is veRL's name for the reward (its rollout dumps' field); the trace's column is" in str(
        refused.value
    )


def test_a_missing_required_column_is_told_first_with_the_alias_that_names_it(tmp_path: Path) -> None:
    path = _write(tmp_path / "runs.csv", [*HEADER[:4], "response_length"], [[0, "a", 0, 5, 30]])
    with pytest.raises(TraceFormatError) as refused:
        read_trace(path)
    assert refused.value.column == "output_tokens"
    assert (
        ": required column is missing (the header has 'response_length', veRL's name for the output "
        "length: import it with trace import --map output_tokens=response_length)"
    ) in str(refused.value)


def test_mapped_onto_the_trace_column_it_is_the_cap_and_onto_another_name_a_feature(tmp_path: Path) -> None:
    path = _write(tmp_path / "runs.csv", [*HEADER, "max_tokens"], [[0, "a", 0, 5, 6, 8]])
    capped = import_generic(path, "csv", parse_mapping(["max_new_tokens=max_tokens"])).trace
    assert capped.max_new_tokens.tolist() == [8]
    assert not capped.numeric
    kept = import_generic(path, "csv", parse_mapping(["requested_cap=max_tokens"])).trace
    assert kept.max_new_tokens.tolist() == [0]  # no cap: the user named it a feature
    assert kept.numeric["requested_cap"].tolist() == [8.0]


def test_the_import_command_without_a_map_refuses_it_and_writes_nothing(
    cli: typer.Typer, tmp_path: Path
) -> None:
    path = _write(tmp_path / "runs.csv", [*HEADER, "max_tokens"], [[0, "a", 0, 5, 30, 8]])
    out = tmp_path / "trace.csv"
    result = CliRunner().invoke(cli, ["trace", "import", str(path), "--from", "csv", "--out", str(out)])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"trace: {path}:1:max_tokens=None: 'max_tokens' is vLLM's and OpenAI's")
    assert not out.exists()


def test_replay_refuses_it_in_one_line(cli: typer.Typer, tmp_path: Path) -> None:
    path = _write(tmp_path / "runs.csv", [*HEADER, "completion_tokens"], [[0, "a", 0, 5, 30, 30]])
    result = CliRunner().invoke(cli, ["replay", str(path), "--workers", "1xH100", "--policies", "lpt"])
    assert result.exit_code == 2
    assert f"{path}:1:completion_tokens=None: 'completion_tokens' is vLLM's" in result.stderr
    assert result.stderr.count("\n") == 1


def test_a_verl_keep_field_by_such_a_name_is_refused_before_any_dump_is_read(tmp_path: Path) -> None:
    # kept, the trace written would hold a column every reader of it refuses
    with pytest.raises(InvalidInputError) as refused:
        import_verl(tmp_path, tmp_path / "no-tokenizer.json", None, keep=["response_length"])
    assert str(refused.value) == (
        "keep-field='response_length': veRL's name for the output length, which the trace holds as "
        "'output_tokens': no feature may carry it"
    )


def test_a_keep_field_naming_such_a_name_in_another_case_is_refused_as_the_readers_refuse_it(
    tmp_path: Path,
) -> None:
    # the readers match another tool's name casefolded: a kept ``Score`` column would be refused by them
    with pytest.raises(InvalidInputError) as refused:
        import_verl(tmp_path, tmp_path / "no-tokenizer.json", None, keep=["Score"])
    assert refused.value.field == "keep-field"
    assert "veRL's name for the reward" in str(refused.value)


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_mapped_onto_the_trace_column_it_reads_row_by_row_too(tmp_path: Path, suffix: str) -> None:
    # the row reader checks the header as renamed: the file's own name for the cap is the --map's source
    path = _write(tmp_path / f"runs{suffix}", [*HEADER, "max_tokens"], [[0, "a", 0, 5, 6, 8]])
    trace = rows_to_trace(read_rows(path, suffix, {"max_tokens": "max_new_tokens"}), str(path))
    assert trace.max_new_tokens.tolist() == [8]
    assert not trace.numeric

"""A header lacking a required column, and a csv row of another width than its header, are said in the
file's own terms: the columns as the file names them (a ``--map``'d one with the name it was given),
the row by the line it begins on, its cells and how many the header wants (trace56)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from predictors.traceio import read_trace
from scheduler.trace import TraceFormatError
from service.traceimport.importers import import_generic, parse_mapping

HEADER = ["epoch", "uid", "k", "plen", "rlen"]
FOUR = ["step=epoch", "prompt_id=uid", "sample_idx=k", "prompt_tokens=plen"]  # rlen left unmapped
MAPPED = [*FOUR, "output_tokens=rlen"]
LISTED = "'epoch' (as step), 'uid' (as prompt_id), 'k' (as sample_idx), 'plen' (as prompt_tokens), 'rlen'"


def _written(path: Path, header: list[str], rows: list[list[object]]) -> Path:
    """``rows`` under ``header`` in ``path``'s format (csv, jsonl or parquet)."""
    if path.suffix == ".csv":
        with path.open("w", newline="") as handle:
            csv.writer(handle).writerows([header, *rows])
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(dict(zip(header, r, strict=True))) + "\n" for r in rows))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({name: [r[i] for r in rows] for i, name in enumerate(header)}), path)
    return path


def _imported(cli: typer.Typer, path: Path, maps: list[str], out: Path) -> tuple[int, str]:
    fmt = path.suffix[1:]
    args = ["trace", "import", str(path), "--from", fmt, *(f"--map={m}" for m in maps), "--out", str(out)]
    result = CliRunner().invoke(cli, args)
    return result.exit_code, result.stderr


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_a_missing_column_lists_the_files_columns_as_the_file_names_them(tmp_path: Path, suffix: str) -> None:
    # They were listed after the renaming: "the columns it has: 'step', 'prompt_id', 'sample_idx',
    # 'prompt_tokens', 'rlen'", names the user's file does not hold.
    path = _written(tmp_path / f"runs{suffix}", HEADER, [[0, "a", 0, 10, 120]])
    with pytest.raises(TraceFormatError) as refused:
        import_generic(path, suffix[1:], parse_mapping(FOUR))
    assert str(refused.value) == (
        f"{path}:1:output_tokens=None: required column is missing (import it with trace import --map "
        f"output_tokens=COLUMN); the columns it has: {LISTED}"
    )


def test_the_trace_import_command_says_the_missing_column_in_the_files_terms(
    cli: typer.Typer, tmp_path: Path
) -> None:
    path = _written(tmp_path / "runs.csv", HEADER, [[0, "a", 0, 10, 120]])
    out = tmp_path / "trace.csv"
    code, err = _imported(cli, path, FOUR, out)
    assert code == 2
    assert err == (
        f"trace: {path}:1:output_tokens=None: required column is missing (import it with trace import "
        f"--map output_tokens=COLUMN); the columns it has: {LISTED}\n"
    )
    assert not out.exists()


def test_a_required_column_the_mapping_renamed_away_shows_what_it_became(tmp_path: Path) -> None:
    # The file has its step, mapped onto reward by mistake: the list read 'reward', ..., and no 'step'.
    path = _written(tmp_path / "runs.csv", ["step", *HEADER[1:]], [[0, "a", 0, 10, 120]])
    with pytest.raises(TraceFormatError) as refused:
        import_generic(path, "csv", parse_mapping(["reward=step", *FOUR[1:], "output_tokens=rlen"]))
    assert str(refused.value).endswith(
        "the columns it has: 'step' (as reward), 'uid' (as prompt_id), 'k' (as sample_idx), "
        "'plen' (as prompt_tokens), 'rlen' (as output_tokens)"
    )


def test_a_csv_row_short_of_its_header_says_its_line_its_cells_and_the_headers_count(
    cli: typer.Typer, tmp_path: Path
) -> None:
    # It read "runs.csv:3:rlen=4: as output_tokens (...): row has 4 cells, expected 5": the row's count
    # shown as the value of the cell it lacks.
    path = tmp_path / "runs.csv"
    path.write_text(",".join(HEADER) + "\n0,a,0,10,120\n0,b,0,10\n")
    expected = f"{path}:3:<row>=['0', 'b', '0', '10']: has 4 cells where the header has 5: no cell for rlen"
    with pytest.raises(TraceFormatError) as refused:
        import_generic(path, "csv", parse_mapping(MAPPED))
    assert str(refused.value) == expected
    code, err = _imported(cli, path, MAPPED, tmp_path / "trace.csv")
    assert (code, err) == (2, f"trace: {expected}\n")


def test_a_csv_row_past_its_header_says_how_many_cells_are_past_it(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("step,prompt_id,sample_idx,prompt_tokens,output_tokens\n\n0,a,b,0,10,100\n")
    with pytest.raises(TraceFormatError) as refused:
        read_trace(path)
    assert str(refused.value) == (
        f"{path}:3:<row>=['0', 'a', 'b', '0', '10', '100']: has 6 cells where the header has 5: 1 past "
        "its last column, 'output_tokens' (a cell holding ',' must be quoted)"
    )


def test_a_short_row_holding_a_line_break_is_named_by_the_line_it_begins_on(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text('step,prompt_id,sample_idx,prompt_tokens,output_tokens\n0,"a\nb",0\n')
    with pytest.raises(TraceFormatError) as refused:
        read_trace(path)
    assert refused.value.line == 2
    assert str(refused.value).endswith(
        "has 3 cells where the header has 5: no cell for prompt_tokens, output_tokens "
        "(the row runs on to line 3: a quoted cell holds a line break)"
    )


def test_a_long_row_is_shown_cut_short(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    header = [*HEADER, *(f"c{i}" for i in range(15))]
    path.write_text(",".join(header) + "\n" + ",".join(["x" * 50] * 10) + "\n")
    with pytest.raises(TraceFormatError) as refused:
        import_generic(path, "csv", parse_mapping(MAPPED))
    assert refused.value.value == ["x" * 40 + "..."] * 8 + ["... 2 more"]
    lacking = ", ".join(f"c{i}" for i in range(5, 15))
    assert str(refused.value).endswith(f"has 10 cells where the header has 20: no cell for {lacking}")

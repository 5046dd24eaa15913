"""Trace files: every format round-trips, and a bad cell is reported by file, line and column."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest

from predictors.traceio import read_renamed, read_trace
from predictors.tracetable import Trace
from predictors.tracewrite import write_trace
from scheduler.errors import InvalidInputError
from scheduler.trace import TraceFormatError, TraceRow

HEADER = "step,prompt_id,sample_idx,prompt_tokens,output_tokens,max_new_tokens,finish_reason,reward,level"


def _rows() -> list[TraceRow]:
    return [
        TraceRow(0, "p0", 0, 10, 100, 4096, "stop", 1.0, {"level": "Level 3", "temp": 0.7}),
        TraceRow(0, "p0", 1, 10, 4096, 4096, "length", 0.0, {"level": "Level 3", "temp": 0.7}),
        TraceRow(1, "p1", 0, 25, 333, None, None, None, {"temp": 1.0}),
    ]


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_every_format_round_trips_rows_and_column_types(tmp_path: Path, suffix: str) -> None:
    trace = Trace.from_rows(_rows())
    path = tmp_path / f"t{suffix}"
    write_trace(trace, path)
    back = read_trace(path)
    assert list(back.rows()) == list(trace.rows())
    assert set(back.numeric) == {"temp"}
    assert set(back.categorical) == {"level"}
    assert back.categorical["level"][2] == ""  # missing categorical stays missing, not "nan"


def test_a_column_is_categorical_when_any_value_is_text(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(
        "step,prompt_id,sample_idx,prompt_tokens,output_tokens,bucket\n0,a,0,5,7,1\n0,a,1,5,9,high\n"
    )
    trace = read_trace(path)
    assert trace.categorical["bucket"].tolist() == ["1", "high"]
    assert not trace.numeric


def test_a_negative_token_count_names_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(f"{HEADER}\n0,a,0,5,7,16,stop,1,x\n0,a,1,5,-3,16,stop,1,x\n")
    with pytest.raises(TraceFormatError) as info:
        read_trace(path)
    assert (info.value.source, info.value.line, info.value.column) == (str(path), 3, "output_tokens")


def test_a_non_integer_token_count_in_jsonl_is_located(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    good = {"step": 0, "prompt_id": "a", "sample_idx": 0, "prompt_tokens": 5, "output_tokens": 7}
    path.write_text(json.dumps(good) + "\n\n" + json.dumps({**good, "prompt_tokens": 2.5}) + "\n")
    with pytest.raises(TraceFormatError) as info:
        read_trace(path)
    assert (info.value.line, info.value.column) == (3, "prompt_tokens")


def test_a_nan_reward_in_parquet_is_an_error_not_a_missing_value(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "bad.parquet"
    cols = {"step": [0, 0], "prompt_id": ["a", "a"], "sample_idx": [0, 1], "prompt_tokens": [5, 5]}
    pq.write_table(pa.table({**cols, "output_tokens": [7, 8], "reward": [1.0, float("nan")]}), path)
    with pytest.raises(TraceFormatError) as info:
        read_trace(path)
    assert (info.value.line, info.value.column) == (2, "reward")


def test_a_missing_required_column_is_named_at_the_header(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("step,prompt_id,sample_idx,prompt_tokens\n0,a,0,5\n")
    with pytest.raises(TraceFormatError) as info:
        read_trace(path)
    assert (info.value.line, info.value.column) == (1, "output_tokens")


def test_a_repeated_header_name_is_refused_without_mentioning_a_map(tmp_path: Path) -> None:
    # `predictor eval` has no --map, yet it said "two columns would carry this name after --map".
    path = tmp_path / "bad.csv"
    path.write_text("step,prompt_id,sample_idx,prompt_tokens,output_tokens,step\n0,a,0,5,7,0\n")
    with pytest.raises(TraceFormatError) as info:
        read_trace(path)
    assert (info.value.line, info.value.column) == (1, "step")
    assert "--map" not in str(info.value)
    assert "columns 1 and 6" in str(info.value)


def test_a_mapping_onto_an_existing_column_still_says_so(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("step,epoch,prompt_id,sample_idx,prompt_tokens,output_tokens\n0,0,a,0,5,7\n")
    with pytest.raises(TraceFormatError, match=r"columns 1 and 2 would both carry this name after --map"):
        read_renamed(path, ".csv", {"epoch": "step"})


def test_blank_header_cells_are_named_by_position(tmp_path: Path) -> None:
    # They used to print as "bad.csv:1:=None", naming nothing.
    path = tmp_path / "bad.csv"
    path.write_text("step,prompt_id,,sample_idx,prompt_tokens,output_tokens,\n0,a,x,0,5,7,y\n")
    with pytest.raises(TraceFormatError) as info:
        read_trace(path)
    assert (info.value.line, info.value.column) == (1, "column 7")
    assert "columns 3 and 7" in str(info.value)
    assert ":1:=" not in str(info.value)


def test_a_short_row_is_an_error_not_a_skip(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("step,prompt_id,sample_idx,prompt_tokens,output_tokens\n0,a,0,5,7\n0,a,1\n")
    with pytest.raises(TraceFormatError) as info:
        read_trace(path)
    assert (info.value.line, info.value.column, info.value.value) == (3, "<row>", ["0", "a", "1"])
    assert info.value.reason == "has 3 cells where the header has 5: no cell for prompt_tokens, output_tokens"


def test_an_empty_trace_is_refused_unless_allowed(tmp_path: Path) -> None:
    path = tmp_path / "empty.csv"
    path.write_text("step,prompt_id,sample_idx,prompt_tokens,output_tokens\n")
    with pytest.raises(InvalidInputError, match="no rows"):
        read_trace(path)
    assert len(read_trace(path, allow_empty=True)) == 0


def test_an_unknown_suffix_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="suffix"):
        read_trace(tmp_path / "t.xlsx")


@pytest.mark.parametrize("name", ["rollouts", "rollouts.csv"])
def test_a_directory_is_called_a_directory_whatever_its_name(tmp_path: Path, name: str) -> None:
    folder = tmp_path / name
    folder.mkdir()
    with pytest.raises(InvalidInputError, match="is a directory, not a trace file"):
        read_trace(folder)


def test_concat_fills_columns_a_part_lacks_with_missing_values() -> None:
    a = Trace.from_rows(_rows()[:1])
    b = Trace.from_rows([TraceRow(2, "p2", 0, 3, 4)])
    both = Trace.concat([a, b])
    assert len(both) == 2
    assert np.isnan(both.numeric["temp"][1])
    assert both.categorical["level"].tolist() == ["Level 3", ""]


def test_the_real_math_trace_loads_whole(shared_data: Path) -> None:
    trace = read_trace(shared_data / "math100_x8.trace.csv")
    assert len(trace) == 800
    assert trace.steps().tolist() == [0, 1]
    assert set(trace.categorical) == {"level"}


def test_a_written_trace_is_readable_by_others_as_the_umask_allows(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    write_trace(Trace.from_rows(_rows()), path)
    old = os.umask(0o022)
    os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~old


@pytest.mark.parametrize("mode", [0o600, 0o640], ids=["0600", "0640"])
def test_a_trace_written_over_another_keeps_its_permissions(tmp_path: Path, mode: int) -> None:
    """``open(path, "w")`` keeps an existing file's mode; the renamed temporary file had the default."""
    path = tmp_path / "t.csv"
    write_trace(Trace.from_rows(_rows()), path)
    path.chmod(mode)
    write_trace(Trace.from_rows(_rows()[:1]), path)
    assert len(read_trace(path)) == 1
    assert stat.S_IMODE(path.stat().st_mode) == mode


def test_text_that_is_not_utf8_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "latin1.csv"
    path.write_bytes(b"step,prompt_id,sample_idx,prompt_tokens,output_tokens\n0,caf\xe9,0,10,100\n")
    with pytest.raises(InvalidInputError, match="not UTF-8"):
        read_trace(path)


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_text_that_is_not_utf8_is_located_at_its_line_and_byte(tmp_path: Path, suffix: str) -> None:
    """The error named ``exc.start``, an offset in the decoder's 8 KiB chunk, "of a line": on line
    2,000 of a csv it read "byte 5054 of a line", and no line held that many bytes."""
    rows = [TraceRow(0, f"p{i}", 0, 10, 100 + i, 4096) for i in range(3000)]
    path = tmp_path / f"t{suffix}"
    write_trace(Trace.from_rows(rows), path)
    lines = path.read_bytes().splitlines(keepends=True)
    bad = 1999  # 0-based: line 2,000 of the file
    lines[bad] = lines[bad].replace(b"p", b"\xe9", 1)  # a Latin-1 byte where the text's "p" stood
    path.write_bytes(b"".join(lines))
    column = lines[bad].index(b"\xe9") + 1
    expected = rf"t\{suffix}:2000:.*not UTF-8 text .* byte {column} of the line"
    with pytest.raises(InvalidInputError, match=expected):
        read_trace(path)


@pytest.mark.parametrize("prompt_tokens", [0, -1])
def test_an_empty_prompt_is_refused_as_engines_refuse_it(tmp_path: Path, prompt_tokens: int) -> None:
    path = tmp_path / "t.csv"
    path.write_text(f"step,prompt_id,sample_idx,prompt_tokens,output_tokens\n0,a,0,{prompt_tokens},100\n")
    with pytest.raises(TraceFormatError, match="prompt_tokens"):
        read_trace(path)


@pytest.mark.parametrize("fast", [True, False])
def test_a_csv_saved_with_a_byte_order_mark_reads_like_any_other(tmp_path: Path, fast: bool) -> None:
    path = tmp_path / "excel.csv"
    path.write_bytes(b"\xef\xbb\xbfstep,prompt_id,sample_idx,prompt_tokens,output_tokens\n0,a,0,10,100\n")
    assert read_trace(path, fast=fast).output_tokens.tolist() == [100]


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_trajectory_in_the_trace_twice_is_refused_by_name(tmp_path: Path, suffix: str) -> None:
    rows = [TraceRow(0, "p", 0, 10, 100, 4096), TraceRow(0, "q", 0, 10, 120, 4096)]
    rows.append(TraceRow(0, "p", 0, 10, 90, 4096))
    path = tmp_path / f"t{suffix}"
    write_trace(Trace.from_rows(rows), path)
    with pytest.raises(InvalidInputError, match="step 0, prompt 'p', sample 0 twice"):
        read_trace(path)


@pytest.mark.parametrize("fast", [True, False])
def test_a_cell_longer_than_pythons_csv_limit_reads_on_either_path(tmp_path: Path, fast: bool) -> None:
    """pyarrow reads any cell; the row-by-row reader hit csv's 128 KiB limit with a traceback."""
    prompt = "x" * 200_000  # a prompt's own text used as its id
    path = tmp_path / "long.csv"
    path.write_text(f"step,prompt_id,sample_idx,prompt_tokens,output_tokens\n0,{prompt},0,10,5\n")
    assert read_trace(path, fast=fast).prompt_id.tolist() == [prompt]


JSONL_ROW = '"step": 0, "sample_idx": 0, "prompt_tokens": 3, "output_tokens": 4'


@pytest.mark.parametrize("cells", ['"prompt_id": "a\\ud800"', '"prompt_id": "a", "x\\udc00": 1'])
def test_a_jsonl_escape_of_an_unpaired_surrogate_is_refused_at_its_line(tmp_path: Path, cells: str) -> None:
    """JSON decodes ``\\ud800`` to text that is no UTF-8: writing the trace failed with a traceback."""
    path = tmp_path / "t.jsonl"
    path.write_text(f"{{{JSONL_ROW}, {cells}}}\n")
    with pytest.raises(TraceFormatError, match=r"t\.jsonl:1:.*not UTF-8 text"):
        read_trace(path)


def test_a_paired_surrogate_escape_in_jsonl_is_ordinary_text(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(f'{{{JSONL_ROW}, "prompt_id": "\\ud83d\\ude80"}}\n')
    assert read_trace(path).prompt_id.tolist() == ["\U0001f680"]


def test_a_jsonl_saved_with_a_byte_order_mark_reads_like_any_other(tmp_path: Path) -> None:
    """As a csv's does; json.loads refused the mark ("Unexpected UTF-8 BOM")."""
    path = tmp_path / "t.jsonl"
    path.write_bytes(f'\ufeff{{{JSONL_ROW}, "prompt_id": "a"}}\n'.encode())
    assert read_trace(path).prompt_id.tolist() == ["a"]


@pytest.mark.parametrize(
    ("column", "cell"),
    [("step", "1_0"), ("step", "\u0665"), ("output_tokens", "1\u0660\u0660"), ("reward", "1_0")],
)
def test_a_number_only_python_reads_is_refused_at_its_cell(tmp_path: Path, column: str, cell: str) -> None:
    """``int`` read "1_0" as 10 and Arabic-Indic "\\u0665" as 5: no plain number, posed as one."""
    cells = {"step": "0", "prompt_id": "a", "sample_idx": "0", "prompt_tokens": "3", "output_tokens": "4"}
    cells[column] = cell
    path = tmp_path / "t.csv"
    path.write_text(",".join(cells) + "\n" + ",".join(cells.values()) + "\n", encoding="utf-8")
    with pytest.raises(TraceFormatError, match=f"t\\.csv:2:{column}.*ASCII"):
        read_trace(path)


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize(
    ("column", "cell", "says"), [("step", "zero", "an integer"), ("reward", "high", "a number")]
)
def test_a_word_in_a_number_column_is_called_not_a_number_in_the_project_s_words(
    tmp_path: Path, fast: bool, column: str, cell: str, says: str
) -> None:
    """float() said "could not convert string to float: 'zero'": Python's words, for an integer column."""
    cells = {"step": "0", "prompt_id": "a", "sample_idx": "0", "prompt_tokens": "3", "output_tokens": "4"}
    cells[column] = cell
    path = tmp_path / "t.csv"
    path.write_text(",".join(cells) + "\n" + ",".join(cells.values()) + "\n", encoding="utf-8")
    with pytest.raises(TraceFormatError) as raised:
        read_trace(path, fast=fast)
    assert str(raised.value) == f"{path}:2:{column}={cell!r}: expected {says}"


def test_a_write_that_fails_leaves_no_folder_it_made(tmp_path: Path) -> None:
    """A name longer than the file system takes fails only once written: the folders made for it stayed."""
    with pytest.raises(OSError, match="too long"):
        write_trace(Trace.from_rows(_rows()), tmp_path / "new" / "deeper" / ("t" * 300 + ".csv"))
    assert list(tmp_path.iterdir()) == []


def test_a_name_as_long_as_the_file_system_takes_is_written(tmp_path: Path) -> None:
    """The temporary file beside it was named after it plus 14 characters, past the limit."""
    path = tmp_path / ("t" * 250 + ".csv")
    write_trace(Trace.from_rows(_rows()), path)
    assert list(read_trace(path).rows()) == list(Trace.from_rows(_rows()).rows())


def test_a_name_of_multibyte_characters_as_long_as_the_file_system_takes_is_written(tmp_path: Path) -> None:
    """The temporary name kept the target's first 64 characters: 64 four-byte ones are past 255 bytes."""
    path = tmp_path / ("\U0001f600" * 62 + ".csv")  # 252 bytes: legal
    write_trace(Trace.from_rows(_rows()), path)
    assert list(read_trace(path).rows()) == list(Trace.from_rows(_rows()).rows())
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def _parquet(path: Path, prompt_id: object, **extra: object) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = {"step": [0, 1], "prompt_id": prompt_id, "sample_idx": [0, 0], "prompt_tokens": [5, 5]}
    pq.write_table(pa.table({**columns, "output_tokens": [3, 4], **extra}), path)
    return path


def test_a_parquet_binary_column_of_utf8_text_reads_as_that_text(tmp_path: Path) -> None:
    """Writers that store text as plain binary (no UTF8 annotation) gave ids like ``b'abc'``: the same
    prompts imported from csv and from such a parquet had different ids."""
    import pyarrow as pa

    path = _parquet(tmp_path / "t.parquet", pa.array([b"abc", "caf\u00e9".encode()], pa.binary()))
    assert read_trace(path).prompt_id.tolist() == ["abc", "caf\u00e9"]


def test_a_parquet_binary_cell_that_is_not_utf8_is_located(tmp_path: Path) -> None:
    import pyarrow as pa

    path = _parquet(tmp_path / "t.parquet", pa.array([b"abc", b"caf\xe9"], pa.binary()))
    with pytest.raises(TraceFormatError, match=r"t\.parquet:2:prompt_id=b'caf\\xe9': not UTF-8 text"):
        read_trace(path)


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_a_list_cell_is_refused_not_kept_as_its_printed_text(tmp_path: Path, suffix: str) -> None:
    # A list feature was kept as the categorical text "[1]"; a list id as "['a']".
    path = tmp_path / f"t{suffix}"
    if suffix == ".parquet":
        _parquet(path, ["a", "a"], level=[[1], [2]])
    else:
        path.write_text(f'{{{JSONL_ROW}, "prompt_id": "a", "level": [1]}}\n')
    with pytest.raises(TraceFormatError, match=r":1:level=\[1\]: a list, not a number or text"):
        read_trace(path)


@pytest.mark.parametrize("ending", ["\n", ""])
@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("row", [0, 1])
def test_a_quote_never_closed_is_an_error_not_the_rest_of_the_file_in_one_cell(
    tmp_path: Path, ending: str, fast: bool, row: int
) -> None:
    """A stray opening quote in a row's last cell made every later line part of that cell: the row
    kept its width, so the rest of the file was dropped without a word (math100: 299 rows of 800)."""
    path = tmp_path / "runaway.csv"
    level = ['"L' if i == row else "L" for i in range(4)]  # this row's quote is never closed
    rows = [f"0,p,{i},5,{7 + i},{level[i]}" for i in range(4)]
    header = "step,prompt_id,sample_idx,prompt_tokens,output_tokens,level\n"
    path.write_text(header + "\n".join(rows) + ending)
    with pytest.raises(TraceFormatError) as info:
        read_trace(path, fast=fast)
    assert (info.value.line, info.value.column) == (2 + row, "level")
    assert "never closed" in str(info.value)


def test_a_quoted_cell_spanning_lines_in_the_last_column_is_still_read(tmp_path: Path) -> None:
    """The check for a quote never closed leaves a closed multi-line cell (last row and column) alone."""
    path = tmp_path / "multiline.csv"
    path.write_text('step,prompt_id,sample_idx,prompt_tokens,output_tokens,note\n0,p,0,5,7,"a\nb"\n')
    for fast in (True, False):
        (row,) = read_trace(path, fast=fast).rows()
        assert row.features == {"note": "a\nb"}


def test_a_key_twice_in_a_jsonl_line_is_an_error_as_a_column_twice_in_a_csv_header(tmp_path: Path) -> None:
    """json.loads kept the last of a repeated key: ``"output_tokens":7,"output_tokens":9`` read as 9,
    silently, where a csv header naming a column twice is refused."""
    path = tmp_path / "twice.jsonl"
    first = '{"step":0,"prompt_id":"p","sample_idx":0,"prompt_tokens":5,"output_tokens":7}\n'
    second = (
        '{"step":0,"prompt_id":"p","sample_idx":1,"prompt_tokens":5,"output_tokens":7,"output_tokens":9}\n'
    )
    path.write_text(first + second)
    with pytest.raises(TraceFormatError) as info:
        read_trace(path)
    assert (info.value.line, info.value.column) == (2, "output_tokens")

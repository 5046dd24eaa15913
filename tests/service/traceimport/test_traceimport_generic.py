"""Importing a renamed generic file (csv, jsonl, parquet with ``--map``) yields a valid trace, or one clear
error naming the file, line and column (veRL dumps: test_traceimport.py)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from scheduler.errors import InvalidInputError
from scheduler.trace import TraceFormatError
from service.traceimport.importers import import_generic, parse_mapping


def test_generic_csv_columns_are_renamed_into_the_schema(tmp_path: Path) -> None:
    path = tmp_path / "runs.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["epoch", "uid", "k", "plen", "rlen", "difficulty"])
        writer.writerow([0, "a", 0, 10, 120, "hard"])
        writer.writerow([1, "a", 0, 10, 140, "hard"])
    mapping = parse_mapping(
        ["step=epoch", "prompt_id=uid", "sample_idx=k", "prompt_tokens=plen", "output_tokens=rlen"]
    )
    trace = import_generic(path, "csv", mapping).trace
    assert trace.output_tokens.tolist() == [120, 140]
    assert trace.categorical["difficulty"].tolist() == ["hard", "hard"]


def test_generic_jsonl_without_a_required_column_says_which_to_map(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps({"step": 0, "prompt_id": "a", "sample_idx": 0, "prompt_tokens": 3}) + "\n")
    with pytest.raises(TraceFormatError, match="output_tokens"):
        import_generic(path, "jsonl", {})


def test_generic_parquet_round_trips(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "runs.parquet"
    table = {
        "step": [0, 0],
        "prompt_id": ["a", "b"],
        "sample_idx": [0, 0],
        "p": [5, 6],
        "output_tokens": [7, 8],
    }
    pq.write_table(pa.table(table), path)
    trace = import_generic(path, "parquet", parse_mapping(["prompt_tokens=p"])).trace
    assert np.array_equal(trace.prompt_tokens, [5, 6])


@pytest.mark.parametrize("pair", ["output_tokens", "=x", "x="])
def test_a_malformed_mapping_is_refused(pair: str) -> None:
    with pytest.raises(InvalidInputError, match="map"):
        parse_mapping([pair])


def _csv(path: Path, header: list[str], *rows: list[object]) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


SCHEMA = ["step", "prompt_id", "sample_idx", "prompt_tokens", "output_tokens"]


def test_a_csv_row_with_a_cell_too_many_is_an_error_not_a_column(tmp_path: Path) -> None:
    path = _csv(tmp_path / "t.csv", SCHEMA, [0, "a", 0, 10, 100, 999])
    with pytest.raises(TraceFormatError, match=r"t\.csv:2:<row>=.*has 6 cells where the header has 5"):
        import_generic(path, "csv", {})


def test_a_count_past_int64_is_located_not_an_overflow(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(dict(zip(SCHEMA, [0, "a", 0, 10, 10**23], strict=True))) + "\n")
    with pytest.raises(TraceFormatError, match=r"t\.jsonl:1:output_tokens.*exceeds"):
        import_generic(path, "jsonl", {})


def test_a_missing_required_column_is_reported_at_the_header(tmp_path: Path) -> None:
    path = _csv(tmp_path / "t.csv", SCHEMA[:4], [0, "a", 0, 10])
    with pytest.raises(TraceFormatError, match=r"t\.csv:1:output_tokens.*--map output_tokens="):
        import_generic(path, "csv", {})


@pytest.mark.parametrize(
    "pairs",
    [["output_tokens=a", "output_tokens=b"], ["output_tokens=a", "sample_idx=a"]],
)
def test_a_column_mapped_twice_is_refused(pairs: list[str]) -> None:
    with pytest.raises(InvalidInputError, match="already mapped"):
        parse_mapping(pairs)


def test_a_mapping_from_a_column_the_file_lacks_is_refused(tmp_path: Path) -> None:
    path = _csv(tmp_path / "t.csv", SCHEMA, [0, "a", 0, 10, 100])
    with pytest.raises(TraceFormatError, match=r"zzz.*no such column"):
        import_generic(path, "csv", parse_mapping(["source=zzz"]))


@pytest.mark.parametrize("header", [["step", "epoch"], ["epoch", "step"]])
def test_a_mapping_onto_a_column_the_file_has_is_refused_whatever_the_order(
    tmp_path: Path, header: list[str]
) -> None:
    path = _csv(tmp_path / "t.csv", [*header, *SCHEMA[1:]], [0, 1, "a", 0, 10, 100])
    with pytest.raises(TraceFormatError, match="would both carry this name after --map"):
        import_generic(path, "csv", parse_mapping(["step=epoch"]))


def test_a_row_key_twice_is_refused_at_import_as_the_replay_would(tmp_path: Path) -> None:
    path = _csv(tmp_path / "t.csv", SCHEMA, [0, "a", 0, 10, 100], [0, "a", 0, 10, 120])
    with pytest.raises(InvalidInputError, match="twice"):
        import_generic(path, "csv", {})


def test_a_jsonl_mapping_from_a_column_no_line_holds_is_refused_as_csv_refuses_it(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(dict(zip(SCHEMA, [0, "a", 0, 10, 100], strict=True))) + "\n")
    with pytest.raises(TraceFormatError) as jsonl_error:
        import_generic(path, "jsonl", parse_mapping(["reward=nosuch"]))
    csv_path = _csv(tmp_path / "t.csv", SCHEMA, [0, "a", 0, 10, 100])
    with pytest.raises(TraceFormatError) as csv_error:
        import_generic(csv_path, "csv", parse_mapping(["reward=nosuch"]))
    assert str(jsonl_error.value).replace(str(path), str(csv_path)) == str(csv_error.value)
    assert str(jsonl_error.value).startswith(f"{path}:1:nosuch=None: no such column to map")


def test_a_jsonl_mapping_from_a_column_only_a_later_line_holds_is_accepted(tmp_path: Path) -> None:
    rows = [dict(zip(SCHEMA, [0, "a", i, 10, 100], strict=True)) for i in range(2)]
    rows[1]["score"] = 0.5
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    trace = import_generic(path, "jsonl", parse_mapping(["reward=score"])).trace
    assert np.isnan(trace.reward[0])
    assert trace.reward[1] == 0.5


def test_a_jsonl_mapping_onto_a_required_column_from_a_column_no_line_holds_names_the_mapping(
    tmp_path: Path,
) -> None:
    # The first line's own error came first and named only the required column:
    # "t.jsonl:1:output_tokens=None: required value is missing", not the --map typo.
    path = tmp_path / "t.jsonl"
    row = dict(zip(SCHEMA, [0, "a", 0, 10, 100], strict=True))
    row["resp_len"] = row.pop("output_tokens")
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(TraceFormatError) as error:
        import_generic(path, "jsonl", parse_mapping(["output_tokens=resp_lne"]))
    assert str(error.value) == (
        f"{path}:1:resp_lne=None: no such column to map (--map output_tokens=resp_lne): "
        "no line up to this one holds it"
    )


def test_a_verl_dump_imported_as_generic_jsonl_is_sent_to_from_verl_not_to_map_a_prompt_id(
    tmp_path: Path,
) -> None:
    # It was refused as "3.jsonl:1:prompt_id=None: required value is missing": the user went looking
    # for a column to --map, where the lines hold text to count, which only --from verl does.
    path = tmp_path / "3.jsonl"
    line = {"input": "user\nwhat is 2+2\nassistant\n", "output": "4", "gts": "4", "score": 1.0, "step": 3}
    path.write_text(json.dumps(line) + "\n")
    with pytest.raises(InvalidInputError) as info:
        import_generic(path, "jsonl", {})
    message = str(info.value)
    assert f"{path}:1" in message
    assert "veRL rollout dump" in message
    assert f"trace import {tmp_path} --from verl --tokenizer" in message


MAPPED = ["step=epoch", "prompt_id=uid", "sample_idx=k", "prompt_tokens=plen", "output_tokens=rlen"]
MAPPED_HEADER = ["epoch", "uid", "k", "plen", "rlen"]


def _mapped_file(path: Path, rows: list[list[object]]) -> Path:
    """``rows`` under the user's own column names (``MAPPED_HEADER``), in ``path``'s format."""
    if path.suffix == ".csv":
        return _csv(path, MAPPED_HEADER, *rows)
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(dict(zip(MAPPED_HEADER, r, strict=True))) + "\n" for r in rows))
        return path
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({name: [r[i] for r in rows] for i, name in enumerate(MAPPED_HEADER)}), path)
    return path


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_a_bad_cell_of_a_mapped_column_names_the_users_column_and_the_one_it_maps_to(
    tmp_path: Path, suffix: str
) -> None:
    # It named the format's column alone: "runs.csv:3:output_tokens='0': must be >= 1: ...", a column
    # the user's file does not have, so the user looked for it in vain.
    path = _mapped_file(tmp_path / f"runs{suffix}", [[0, "a", 0, 10, 120], [0, "b", 0, 10, 0]])
    line, cell = (3, "'0'") if suffix == ".csv" else (2, "0")  # csv counts its header, and reads text
    with pytest.raises(TraceFormatError) as refused:
        import_generic(path, suffix[1:], parse_mapping(MAPPED))
    assert refused.value.column == "rlen"
    assert str(refused.value) == (
        f"{path}:{line}:rlen={cell}: as output_tokens (--map output_tokens=rlen): "
        "must be >= 1: a generation is at least the token it ended on (an empty one is its EOS)"
    )


def test_a_short_row_names_the_users_column_it_lacks(tmp_path: Path) -> None:
    path = tmp_path / "runs.csv"
    path.write_text(",".join(MAPPED_HEADER) + "\n0,a,0,10\n")
    with pytest.raises(TraceFormatError, match=r"runs\.csv:2:<row>=.*: no cell for rlen$"):
        import_generic(path, "csv", parse_mapping(MAPPED))


def test_a_cell_of_a_column_left_unmapped_names_the_formats_column_as_before(tmp_path: Path) -> None:
    path = _csv(tmp_path / "t.csv", ["step", "uid", *SCHEMA[2:]], [0, "a", 0, 0, 100])
    with pytest.raises(TraceFormatError) as refused:
        import_generic(path, "csv", parse_mapping(["prompt_id=uid"]))
    assert str(refused.value) == f"{path}:2:prompt_tokens='0': must be >= 1"


def test_columns_mapped_onto_each_other_name_the_users_column_of_the_bad_cell(tmp_path: Path) -> None:
    # the file's prompt_tokens is the output, its output_tokens the prompt: the 0 is in its prompt_tokens
    path = _csv(tmp_path / "t.csv", SCHEMA, [0, "a", 0, 0, 100])
    mapping = parse_mapping(["output_tokens=prompt_tokens", "prompt_tokens=output_tokens"])
    with pytest.raises(TraceFormatError) as refused:
        import_generic(path, "csv", mapping)
    assert str(refused.value).startswith(
        f"{path}:2:prompt_tokens='0': as output_tokens (--map output_tokens=prompt_tokens): must be >= 1"
    )


def test_a_key_a_jsonl_line_holds_twice_is_named_as_the_line_names_it_whatever_the_mapping(
    tmp_path: Path,
) -> None:
    # read before the renaming: the repeated key is the file's own, though a mapped column lands on it
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"epoch": 0, "uid": "a", "k": 0, "plen": 10, "rlen": 5, "output_tokens": 1, "output_tokens": 2}\n'
    )
    with pytest.raises(TraceFormatError) as refused:
        import_generic(path, "jsonl", parse_mapping(MAPPED))
    assert str(refused.value) == f"{path}:1:output_tokens=None: appears twice in the line"


CAPPED = [*MAPPED, "max_new_tokens=cap"]


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_an_output_past_a_mapped_cap_names_the_users_cap_column_too(tmp_path: Path, suffix: str) -> None:
    # It named the format's cap: "rlen='7': as output_tokens (...): exceeds max_new_tokens=5", a
    # column the user's file does not have (trace55).
    path = tmp_path / f"runs{suffix}"
    rows = [[0, "a", 0, 10, 4, 5], [0, "b", 0, 10, 7, 5]]
    header = [*MAPPED_HEADER, "cap"]
    if suffix == ".csv":
        _csv(path, header, *rows)
    else:
        path.write_text("".join(json.dumps(dict(zip(header, r, strict=True))) + "\n" for r in rows))
    line = 3 if suffix == ".csv" else 2
    with pytest.raises(TraceFormatError) as refused:
        import_generic(path, suffix[1:], parse_mapping(CAPPED))
    assert str(refused.value) == (
        f"{path}:{line}:rlen=7: as output_tokens (--map output_tokens=rlen): "
        "exceeds cap=5 (as max_new_tokens: --map max_new_tokens=cap)"
    )


def test_an_output_past_a_mapped_cap_names_the_cap_as_the_file_does_where_the_output_is_unmapped(
    tmp_path: Path,
) -> None:
    path = _csv(tmp_path / "t.csv", [*SCHEMA, "cap"], [0, "a", 0, 10, 7, 5])
    with pytest.raises(TraceFormatError) as refused:
        import_generic(path, "csv", parse_mapping(["max_new_tokens=cap"]))
    assert str(refused.value) == (
        f"{path}:2:output_tokens=7: exceeds cap=5 (as max_new_tokens: --map max_new_tokens=cap)"
    )


def test_an_output_past_an_unmapped_cap_is_said_as_before(tmp_path: Path) -> None:
    path = _csv(tmp_path / "t.csv", [*MAPPED_HEADER, "max_new_tokens"], [0, "a", 0, 10, 7, 5])
    with pytest.raises(TraceFormatError) as refused:
        import_generic(path, "csv", parse_mapping(MAPPED))
    assert str(refused.value) == (
        f"{path}:2:rlen=7: as output_tokens (--map output_tokens=rlen): exceeds max_new_tokens=5"
    )


def test_two_cells_of_a_jsonl_line_that_one_name_would_carry_are_named_as_the_mapping_names_them(
    tmp_path: Path,
) -> None:
    # the renaming's own refusal names the format's column the two land on, not a cell's error after it
    path = tmp_path / "t.jsonl"
    path.write_text('{"epoch": 0, "uid": "a", "k": 0, "plen": 10, "rlen": 5, "output_tokens": 1}\n')
    with pytest.raises(TraceFormatError) as refused:
        import_generic(path, "jsonl", parse_mapping(MAPPED))
    assert str(refused.value) == f"{path}:1:output_tokens=1: two cells would carry this name after --map"


def test_two_columns_of_a_header_that_one_name_would_carry_are_named_as_the_mapping_names_them(
    tmp_path: Path,
) -> None:
    # a name other than its format's: the rows are read one by one, not by the vectorised reader
    path = _csv(tmp_path / "t.txt", [*MAPPED_HEADER, "output_tokens"], [0, "a", 0, 10, 5, 1])
    with pytest.raises(TraceFormatError) as refused:
        import_generic(path, "csv", parse_mapping(MAPPED))
    assert str(refused.value) == (
        f"{path}:1:output_tokens=None: columns 5 and 6 would both carry this name after --map"
    )


def test_a_mapped_column_no_jsonl_line_holds_is_named_as_the_mapping_names_it_where_columns_swap(
    tmp_path: Path,
) -> None:
    # the file's prompt_tokens is also a name the mapping gives: the refusal still names the file's key
    path = tmp_path / "t.jsonl"
    path.write_text('{"step": 0, "prompt_id": "a", "sample_idx": 0, "output_tokens": 5}\n')
    mapping = parse_mapping(["output_tokens=prompt_tokens", "prompt_tokens=output_tokens"])
    with pytest.raises(TraceFormatError) as refused:
        import_generic(path, "jsonl", mapping)
    assert str(refused.value) == (
        f"{path}:1:prompt_tokens=None: no such column to map (--map output_tokens=prompt_tokens):"
        " no line up to this one holds it"
    )

"""A renamed generic import takes the vectorised reader where it applies, with the row path's result."""

from __future__ import annotations

import csv
import gzip
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from predictors.tracefast import fast_trace
from predictors.traceio import read_rows, rows_to_trace
from predictors.tracerename import in_file_terms
from predictors.tracetable import Trace
from scheduler.errors import InvalidInputError
from scheduler.trace import TraceFormatError
from service.traceimport.importers import import_generic, parse_mapping

HEADER = ["epoch", "uid", "k", "plen", "rlen", "cap", "finish_reason", "score", "level", "temp"]
ROWS = [
    ["0", "a", "0", "10", "120", "4096", "stop", "1", "L1", "0.7"],
    ["0", "a", "1", "10", "4096", "4096", "length", "0", "L2", "0.7"],
    ["1", "b", "0", "12", "99", "4096", "", "", "L1", "1.0"],
]
MAP = ["step=epoch", "prompt_id=uid", "sample_idx=k", "prompt_tokens=plen", "output_tokens=rlen"]
MAP += ["max_new_tokens=cap", "reward=score"]


def _write(path: Path, rows: list[list[str]], header: list[str] = HEADER) -> Path:
    if path.suffix == ".parquet":
        columns = {name: [row[i] for row in rows] for i, name in enumerate(header)}
        pq.write_table(pa.table(columns), path)
        return path
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def _summary(trace: Trace) -> tuple[object, ...]:
    return ("trace", list(trace.rows()), sorted(trace.numeric), sorted(trace.categorical))


def _outcomes(path: Path, pairs: list[str]) -> tuple[tuple[object, ...], tuple[object, ...]]:
    """(import_generic's result, the row-by-row reader's), each a trace summary or the error text
    (a renamed column's named as the file names it: ``in_file_terms``)."""
    mapping = parse_mapping(pairs)

    def imported() -> Trace:
        return import_generic(path, path.suffix[1:], mapping).trace

    def row_by_row() -> Trace:
        try:
            return rows_to_trace(read_rows(path, path.suffix, mapping), str(path))
        except TraceFormatError as error:  # in the file's column names, as an import says it (learn54)
            raise in_file_terms(error, mapping) from None

    return _outcome(imported), _outcome(row_by_row)


def _outcome(read: Callable[[], Trace]) -> tuple[object, ...]:
    try:
        return _summary(read())
    except InvalidInputError as exc:  # TraceFormatError included
        return ("error", type(exc).__name__, str(exc))


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_clean_renamed_csv_or_parquet_import_takes_the_vectorised_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str
) -> None:
    answers: list[Trace | None] = []

    def spy(table: Any) -> Trace | None:
        answers.append(fast_trace(table))
        return answers[-1]

    monkeypatch.setattr("predictors.traceio.fast_trace", spy)
    import_generic(_write(tmp_path / f"t{suffix}", ROWS), suffix[1:], parse_mapping(MAP))
    assert len(answers) == 1
    assert answers[0] is not None


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_renamed_import_gives_the_row_by_row_trace(tmp_path: Path, suffix: str) -> None:
    fast, slow = _outcomes(_write(tmp_path / f"t{suffix}", ROWS), MAP)
    assert fast == slow
    assert fast[0] == "trace"


BAD = {
    "a negative count": ([ROWS[0], ["0", "a", "1", "10", "-3", "4096", "stop", "1", "L1", "0.7"]], MAP),
    "a count past its cap": ([ROWS[0], ["0", "a", "1", "10", "5000", "4096", "", "", "L1", "0.7"]], MAP),
    "a mapped column the file lacks": (ROWS, [*MAP, "source=nosuch"]),
    "a renaming onto a column the file has": (ROWS, [*MAP, "level=temp"]),
    "a required column left unmapped": (ROWS, MAP[1:]),
}


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
@pytest.mark.parametrize("case", sorted(BAD))
def test_a_renamed_import_of_bad_input_fails_with_the_row_by_row_error(
    tmp_path: Path, suffix: str, case: str
) -> None:
    rows, pairs = BAD[case]
    fast, slow = _outcomes(_write(tmp_path / f"t{suffix}", rows), pairs)
    assert fast == slow
    assert fast[0] == "error"


def test_a_file_named_for_another_format_is_read_as_the_row_reader_reads_it(tmp_path: Path) -> None:
    """pyarrow would decompress a ``.gz`` file that the row reader sees as (non-UTF-8) bytes."""
    text = _write(tmp_path / "t.csv", ROWS).read_bytes()
    path = tmp_path / "t.gz"
    path.write_bytes(gzip.compress(text))
    with pytest.raises(InvalidInputError, match="not UTF-8"):
        import_generic(path, "csv", parse_mapping(MAP))

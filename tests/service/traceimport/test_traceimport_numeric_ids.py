"""``trace import`` gives one prompt one id whatever format its file came in (ids56): a prompt id
written as a number (a jsonl number, a parquet int, float or decimal column) is the integer's digits
(``1.0`` -> ``'1'``, as jsonl's ``1`` and csv's ``1``), text is kept as written (csv's ``1.0`` is the
id ``1.0``), and a number that is no id (``1.5``, NaN) is refused at its cell in the file's names.
A parquet float id column (pandas' int column after a null or a merge) imported as ``'1.0'``, so
steps imported from it and from jsonl held one prompt under two ids."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from predictors.traceio import read_trace

JSONL_ROW = '{"epoch": 0, "uid": %s, "k": %d, "plen": 5, "rlen": 3}\n'
MAPS = ("step=epoch", "prompt_id=uid", "sample_idx=k", "prompt_tokens=plen", "output_tokens=rlen")


def _source(folder: Path, fmt: str, ids: list[str]) -> Path:
    """A file of ``fmt`` under other column names whose ``uid`` cells are ``ids`` as written (jsonl
    literals; a parquet column of floats; csv text)."""
    path = folder / f"runs.{fmt}"
    if fmt == "jsonl":
        path.write_text("".join(JSONL_ROW % (uid, k) for k, uid in enumerate(ids)))
    elif fmt == "csv":
        rows = "".join(f"0,{uid},{k},5,3\n" for k, uid in enumerate(ids))
        path.write_text("epoch,uid,k,plen,rlen\n" + rows)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        n = len(ids)
        columns = {"epoch": [0] * n, "uid": [float(u) for u in ids], "k": list(range(n))}
        pq.write_table(pa.table({**columns, "plen": [5] * n, "rlen": [3] * n}), path)
    return path


def _import(cli: typer.Typer, path: Path, fmt: str, out: Path) -> tuple[int, str]:
    args = ["trace", "import", str(path), "--from", fmt, *(f"--map={m}" for m in MAPS), "--out", str(out)]
    result = CliRunner().invoke(cli, args)
    return result.exit_code, result.stderr


@pytest.mark.parametrize(
    ("fmt", "ids", "read"),
    [
        ("parquet", ["1.0", "2.0"], ["1", "2"]),
        ("jsonl", ["1.0", "2"], ["1", "2"]),
        ("jsonl", ["1e0", '"2.0"'], ["1", "2.0"]),
        ("csv", ["1", "2.0"], ["1", "2.0"]),
    ],
)
@pytest.mark.parametrize("out_suffix", [".jsonl", ".parquet", ".csv"])
def test_the_import_writes_a_number_id_as_its_integer_and_text_as_written(
    cli: typer.Typer, tmp_path: Path, fmt: str, ids: list[str], read: list[str], out_suffix: str
) -> None:
    out = tmp_path / f"trace{out_suffix}"
    assert _import(cli, _source(tmp_path, fmt, ids), fmt, out) == (0, "")
    assert read_trace(out).prompt_id.tolist() == read


@pytest.mark.parametrize(("fmt", "line", "shown"), [("parquet", 2, "1.5"), ("jsonl", 2, "1.5")])
def test_the_import_refuses_a_fractional_id_naming_the_file_column(
    cli: typer.Typer, tmp_path: Path, fmt: str, line: int, shown: str
) -> None:
    path, out = _source(tmp_path, fmt, ["1.0", "1.5"]), tmp_path / "trace.jsonl"
    code, stderr = _import(cli, path, fmt, out)
    assert code == 2
    assert stderr == (
        f"trace: {path}:{line}:uid={shown}: as prompt_id (--map prompt_id=uid): "
        "a number as an id must be an integer (a column of reals taken for the ids?)\n"
    )
    assert not out.exists()


def test_the_import_refuses_a_nan_id_as_a_missing_one(cli: typer.Typer, tmp_path: Path) -> None:
    path, out = _source(tmp_path, "jsonl", ["1", "NaN"]), tmp_path / "trace.jsonl"
    code, stderr = _import(cli, path, "jsonl", out)
    assert code == 2
    assert stderr.startswith(f"trace: {path}:2:uid=nan: as prompt_id (--map prompt_id=uid): required value")
    assert not out.exists()

"""A ``--map`` onto a trace column misspelt is refused: any other target keeps the column as a feature of
that name, so ``--map max_new_token=cap`` imported a trace without a cap and a feature nobody asked
for, without a word (trace56). A name far from every trace column still renames a feature."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from scheduler.errors import InvalidInputError
from service.traceimport.importers import import_generic, parse_mapping

HEADER = "step,prompt_id,sample_idx,prompt_tokens,output_tokens,cap,score,difficulty\n"


@pytest.mark.parametrize(
    ("pair", "meant"),
    [
        ("max_new_token=cap", "max_new_tokens"),
        ("rewards=score", "reward"),
        ("Reward=score", "reward"),
        ("output_token=rlen", "output_tokens"),
        ("steps=epoch", "step"),
        ("sample_id=k", "sample_idx"),
    ],
)
def test_a_map_onto_a_misspelt_trace_column_is_refused_naming_the_column(pair: str, meant: str) -> None:
    with pytest.raises(InvalidInputError) as refused:
        parse_mapping(["prompt_id=uid", pair])
    target = pair.partition("=")[0]
    assert str(refused.value) == (
        f"map={pair!r}: {target!r} is no trace column, {meant!r} is "
        "(a --map onto another name keeps a feature)"
    )


def test_the_import_command_refuses_it_and_writes_nothing(cli: typer.Typer, tmp_path: Path) -> None:
    path = tmp_path / "runs.csv"
    path.write_text(HEADER + "0,a,0,5,3,8,1.0,hard\n")
    out = tmp_path / "trace.csv"
    args = ["trace", "import", str(path), "--from", "csv", "--map", "max_new_token=cap", "--out", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert result.stderr.startswith("trace: map='max_new_token=cap': 'max_new_token' is no trace column")
    assert not out.exists()


def test_a_map_onto_a_name_far_from_every_trace_column_renames_a_feature(tmp_path: Path) -> None:
    path = tmp_path / "runs.csv"
    path.write_text(HEADER + "0,a,0,5,3,8,1.0,hard\n")
    trace = import_generic(path, "csv", parse_mapping(["level=difficulty", "max_new_tokens=cap"])).trace
    assert trace.categorical["level"].tolist() == ["hard"]
    assert trace.max_new_tokens.tolist() == [8]

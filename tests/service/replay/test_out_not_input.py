"""A command never writes over what it reads: ``trace import`` its source file or a ``{step}.jsonl``
in the veRL folder it imports (which the next import would read as a dump), ``replay`` its trace."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tests.service.traceimport.wordtokenizer import write_word_tokenizer

GENERIC = "epoch,prompt_id,sample_idx,prompt_tokens,output_tokens\n0,a,0,10,100\n"


def _run(
    cli: typer.Typer, args: list[str], command: tuple[str, ...] = ("trace", "import")
) -> tuple[int, str]:
    result = CliRunner().invoke(cli, [*command, *args])
    return result.exit_code, result.stderr


def test_an_import_over_its_own_source_file_is_refused_and_the_file_kept(
    cli: typer.Typer, tmp_path: Path
) -> None:
    # It wrote the renamed trace over runs.csv: the user's file, with its own column names, was gone.
    path = tmp_path / "runs.csv"
    path.write_text(GENERIC)
    for out in (path, tmp_path / "." / "runs.csv"):
        code, err = _run(cli, [str(path), "--from", "csv", "--map", "step=epoch", "--out", str(out)])
        assert code == 2
        assert "is the file being imported" in err
        assert len(err.strip().splitlines()) == 1
    assert path.read_text() == GENERIC


def test_an_import_into_the_verl_folder_as_a_step_dump_is_refused(cli: typer.Typer, tmp_path: Path) -> None:
    # verl/5.jsonl was written in the trace's columns; every later import of the folder then failed on it.
    folder = tmp_path / "verl"
    folder.mkdir()
    (folder / "1.jsonl").write_text('{"input": "a b", "output": "c", "score": 1.0, "step": 1}\n')
    tokenizer = write_word_tokenizer(tmp_path / "tokenizer.json", ["a", "b", "c"])
    code, err = _run(cli, [str(folder), "--tokenizer", str(tokenizer), "--out", str(folder / "5.jsonl")])
    assert code == 2
    assert "would be read as a rollout dump" in err
    assert not (folder / "5.jsonl").exists()


@pytest.mark.parametrize("option", ["--plot", "--report"])
def test_a_replay_output_on_the_trace_itself_is_refused_before_the_replay(
    cli: typer.Typer, tmp_path: Path, option: str
) -> None:
    # replay t.csv --plot t.csv replaced the trace with the Gantt chart's PNG.
    path = tmp_path / "t.csv"
    path.write_text(GENERIC.replace("epoch", "step"))
    code, err = _run(cli, [str(path), "--workers", "1xH100", option, str(path)], command=("replay",))
    assert code == 2
    assert "is the trace being replayed" in err
    assert path.read_text() == GENERIC.replace("epoch", "step")

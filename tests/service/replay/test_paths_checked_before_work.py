"""Paths are checked before any work: a folder, a file, a wrong format or a clash is one line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import typer

from tests.service.replay.clirun import FAST, IN_PROCESS, run


def test_an_unwritable_report_path_is_refused_before_the_replay_runs(
    cli: typer.Typer, small_trace_file: Path, tmp_path: Path
) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("")
    args = ["replay", str(small_trace_file), "--workers", "1xH100", "--report", str(blocker / "r.html")]
    code, out, err = run(cli, [*args, "--json", *FAST])
    assert code == 2
    assert out == ""  # nothing was replayed
    assert "report" in err


@pytest.mark.parametrize("option", ["--plot", "--report"])
def test_an_existing_output_file_that_cannot_be_overwritten_is_refused_before_the_replay(
    cli: typer.Typer, small_trace_file: Path, tmp_path: Path, option: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "locked.out"
    target.write_text("kept")
    target.chmod(0o444)
    real_access = os.access

    def access(path: str | os.PathLike[str], mode: int) -> bool:
        """Root may write a read-only file anyway: answer for it as the OS answers other users."""
        return not (Path(path) == target and mode & os.W_OK) and real_access(path, mode)

    monkeypatch.setattr(os, "access", access)
    code, out, err = run(cli, ["replay", str(small_trace_file), "--workers", "1xH100", option, str(target)])
    assert code == 2
    assert "exists and cannot be overwritten" in err
    assert out == ""  # no replay ran
    assert target.read_text() == "kept"


def test_a_directory_given_as_the_trace_is_called_a_directory(cli: typer.Typer, tmp_path: Path) -> None:
    folder = tmp_path / "trace.csv"
    folder.mkdir()
    code, _, err = run(cli, ["replay", str(folder), "--workers", "1xH100"])
    assert code == 2
    assert "is a directory" in err
    assert "no such file" not in err


def test_trace_synth_into_a_directory_names_the_out_option_not_a_temporary_file(
    cli: typer.Typer, tmp_path: Path
) -> None:
    folder = tmp_path / "dir.csv"
    folder.mkdir()
    code, _, err = run(cli, ["trace", "synth", "--prompts", "2", "--samples", "2", "--out", str(folder)])
    assert code == 2
    assert err.strip() == f"trace: out={str(folder)!r}: is a directory"


def test_an_output_that_fails_while_written_leaves_no_other_output_and_no_new_folder(
    cli: typer.Typer, small_trace_file: Path, tmp_path: Path
) -> None:
    """A name longer than the file system takes passes every check (its folder does not exist yet):
    the PNG was written, then the report failed, leaving the PNG and the folder made for the report."""
    out = tmp_path / "out"
    out.mkdir()
    png, page = out / "gantt.png", out / "new" / ("r" * 300 + ".html")
    args = ["replay", str(small_trace_file), "--workers", "1xH100", "--policies", "lpt", "--steps", "1"]
    code, _, err = run(cli, [*args, "--plot", str(png), "--report", str(page), *FAST, *IN_PROCESS])
    assert code == 2
    assert err.startswith(f"replay: report={str(page)!r}: cannot be written"), err
    assert len(err.strip().splitlines()) == 1
    assert list(out.iterdir()) == []


def test_two_outputs_at_one_path_are_refused_before_the_replay(
    cli: typer.Typer, small_trace_file: Path, tmp_path: Path
) -> None:
    """The report overwrote the chart written a moment before."""
    both = tmp_path / "out" / "out.png"
    args = ["replay", str(small_trace_file), "--workers", "1xH100", "--plot", str(both)]
    code, out, err = run(cli, [*args, "--report", str(both), "--json", *FAST, *IN_PROCESS])
    assert code == 2
    assert out == ""
    assert err.strip() == f"replay: report={str(both)!r}: is also --plot's path"
    assert not both.parent.exists()


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["trace", "import", "{dumps}", "--tokenizer", "{folder}", "--out", "{o}"],
         "trace: tokenizer='{folder}': holds no tokenizer.json (it is empty)"),  # a model folder may
        (["trace", "import", "--from", "csv", "{folder}", "--out", "{o}"],
         "trace: trace='{folder}': is a directory, not a trace file"),
        (["trace", "import", "{file}", "--tokenizer", "{file}", "--out", "{o}"],
         "trace: dir='{file}': is a file, not a folder of {{step}}.jsonl rollout dumps"),
        (["trace", "synth", "--prompts", "1", "--samples", "1", "--steps", "1", "--out", "{folder}"],
         "trace: out='{folder}': is a directory"),
        (["replay", "{file}", "--workers", "1xH100", "--plot", "{folder}"],
         "replay: plot='{folder}': is a directory"),
    ],
)  # fmt: skip
def test_a_folder_where_a_file_is_expected_is_called_a_folder_and_a_file_where_a_folder_is_a_file(
    cli: typer.Typer, tmp_path: Path, args: list[str], line: str
) -> None:
    """Each said something untrue: "no such file" for a folder, "unsupported suffix" for a folder
    named without one, "no such directory" for a file."""
    folder, dumps, file = tmp_path / "folder", tmp_path / "dumps", tmp_path / "t.csv"
    folder.mkdir()
    dumps.mkdir()
    (dumps / "0.jsonl").write_text("")
    file.write_text("step,prompt_id,sample_idx,prompt_tokens,output_tokens\n0,a,0,3,4\n")
    names = {"folder": folder, "dumps": dumps, "file": file, "o": tmp_path / "o.csv"}
    code, _, err = run(cli, [a.format(**names) for a in args])
    assert code == 2
    assert err.splitlines() == [line.format(**names)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dumps", "folder", "t.csv"]


@pytest.mark.parametrize(
    ("option", "name", "reason"),
    [
        ("--plot", "g.txt", "must end in .png (the chart is a PNG image)"),
        ("--plot", "gantt", "must end in .png (the chart is a PNG image)"),
        ("--plot", "g.svg", "must end in .png (the chart is a PNG image)"),
        ("--report", "r.png", "must end in .html or .htm (the report is one HTML page)"),
        ("--report", "report", "must end in .html or .htm (the report is one HTML page)"),
    ],
)
def test_an_output_named_for_another_format_is_refused_before_the_replay(
    cli: typer.Typer, small_trace_file: Path, tmp_path: Path, option: str, name: str, reason: str
) -> None:
    """``--plot g.txt`` wrote a PNG into g.txt, after the whole replay."""
    target = tmp_path / "out" / name
    code, out, err = run(cli, ["replay", str(small_trace_file), "--workers", "1xH100", option, str(target)])
    assert code == 2
    assert out == ""  # no replay ran
    assert err.splitlines() == [f"replay: {option[2:]}={str(target)!r}: {reason}"]
    assert not target.parent.exists()

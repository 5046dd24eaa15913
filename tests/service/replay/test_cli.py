"""``replay`` and ``trace`` commands: useful output on good input, one clear line on bad input."""

from __future__ import annotations

import base64
import csv
import json
import os
import stat
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tests.service.replay.wordtokenizer import write_word_tokenizer

FAST = ["--time-budget", "0.2"]
# Output checks play the policies in this process: a spawned pool re-imports the scheduler in each of
# its workers (~4 s a replay on 2 cores) and changes no number (test_replay.py's
# test_policies_played_in_worker_processes_give_what_they_give_in_turn). The CLI's default pool is
# still run by test_replay_json_reports_the_bound_and_each_policy, and by test_interrupt.py.
IN_PROCESS = ["--processes", "1"]


def _run(cli: typer.Typer, args: list[str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, args)
    return result.exit_code, result.stdout, result.stderr


def test_replay_json_reports_the_bound_and_each_policy(cli: typer.Typer, small_trace_file: Path) -> None:
    code, out, _ = _run(
        cli,
        [
            "replay",
            str(small_trace_file),
            "--workers",
            "2xH100,1xAscend910B",
            "--steps",
            "2",
            "--json",
            *FAST,
        ],
    )
    assert code == 0
    data = json.loads(out)
    assert data["lower_bound_s"] > 0
    assert set(data["policies"]) == {"round_robin", "least_loaded", "lpt", "cpsat", "oracle"}
    assert all(p["makespan_s"] >= data["lower_bound_s"] * (1 - 1e-9) for p in data["policies"].values())


def test_replay_writes_a_gantt_png_and_a_self_contained_html_report(
    cli: typer.Typer, small_trace_file: Path, tmp_path: Path
) -> None:
    png, page = tmp_path / "gantt.png", tmp_path / "out" / "report.html"
    args = ["replay", str(small_trace_file), "--workers", "2xH100", "--policies", "round_robin,lpt"]
    code, out, _ = _run(
        cli, [*args, "--steps", "1-2", "--plot", str(png), "--report", str(page), *FAST, *IN_PROCESS]
    )
    assert code == 0
    assert "lpt" in out
    assert png.read_bytes().startswith(b"\x89PNG")
    text = page.read_text()
    assert "<table>" in text
    embedded = text.split("data:image/png;base64,")[1].split('"')[0]
    assert base64.b64decode(embedded).startswith(b"\x89PNG")
    assert 'src="http' not in text


@pytest.mark.parametrize("mode", [0o600, 0o640], ids=["0600", "0640"])
def test_a_replay_over_an_existing_chart_and_report_keeps_their_permissions(
    cli: typer.Typer, small_trace_file: Path, tmp_path: Path, mode: int
) -> None:
    """``open(path, "w")`` keeps an existing file's mode; the outputs renamed into place had the default."""
    png, page = tmp_path / "gantt.png", tmp_path / "report.html"
    for path in (png, page):
        path.write_bytes(b"old")
        path.chmod(mode)
    args = ["replay", str(small_trace_file), "--workers", "1xH100", "--policies", "lpt", "--steps", "1"]
    code, _, _ = _run(cli, [*args, "--plot", str(png), "--report", str(page), *FAST, *IN_PROCESS])
    assert code == 0
    assert png.read_bytes().startswith(b"\x89PNG")
    assert [stat.S_IMODE(p.stat().st_mode) for p in (png, page)] == [mode, mode]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--workers", "8xTPU"], "TPU"),
        (["--workers", "8xH100:"], "workers"),
        (["--workers", "2xH100", "--steps", "40-50"], "steps"),
        (["--workers", "2xH100", "--policies", "magic"], "magic"),
        (["--workers", "2xH100", "--policies", "lpt,,cpsat"], "policies='lpt,,cpsat': "),
        (["--workers", "2xH100", "--policies", "lpt,lpt"], "policies='lpt,lpt': names lpt more than once"),
        (["--workers", "2xH100", "--model", "70b"], "70b"),
        (["--workers", "2xH100", "--seed", "-1"], "seed"),
        (["--workers", "2xH100", "--steps", "3-"], "selects no step"),
    ],
)
def test_bad_replay_input_is_one_line_on_stderr_and_a_nonzero_exit(
    cli: typer.Typer, small_trace_file: Path, args: list[str], needle: str
) -> None:
    code, _, err = _run(cli, ["replay", str(small_trace_file), *args, *FAST])
    assert code != 0
    assert needle in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_a_trace_without_required_columns_is_refused_by_name(cli: typer.Typer, tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    with path.open("w", newline="") as handle:
        csv.writer(handle).writerows([["step", "prompt_id", "sample_idx"], [0, "a", 0]])
    code, _, err = _run(cli, ["replay", str(path), "--workers", "1xH100"])
    assert code != 0
    assert "prompt_tokens" in err
    assert len(err.strip().splitlines()) == 1


def test_trace_synth_writes_a_labelled_synthetic_trace(cli: typer.Typer, tmp_path: Path) -> None:
    out = tmp_path / "s.jsonl"
    args = ["trace", "synth", "--profile", "short-cot", "--prompts", "3", "--samples", "2", "--steps", "2"]
    code, stdout, _ = _run(cli, [*args, "--seed", "1", "--out", str(out)])
    assert code == 0
    assert "SYNTHETIC" in stdout
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 12
    assert {r["source"] for r in rows} == {"synthetic"}


@pytest.mark.parametrize("mode", [0o600, 0o640], ids=["0600", "0640"])
def test_trace_synth_over_an_existing_trace_keeps_its_permissions(
    cli: typer.Typer, tmp_path: Path, mode: int
) -> None:
    out = tmp_path / "s.csv"
    out.write_text("old\n")
    out.chmod(mode)
    code, _, _ = _run(
        cli, ["trace", "synth", "--prompts", "2", "--samples", "2", "--steps", "1", "--out", str(out)]
    )
    assert code == 0
    assert out.read_text() != "old\n"
    assert stat.S_IMODE(out.stat().st_mode) == mode


def test_trace_synth_refuses_an_unknown_profile(cli: typer.Typer, tmp_path: Path) -> None:
    code, _, err = _run(cli, ["trace", "synth", "--profile", "huge", "--out", str(tmp_path / "x.csv")])
    assert code != 0
    assert "huge" in err


def test_trace_import_verl_says_which_tokenizer_counted(cli: typer.Typer, tmp_path: Path) -> None:
    write_word_tokenizer(tmp_path / "tokenizer.json", ["[UNK]", "a", "b"])
    dumps = tmp_path / "rollouts"
    dumps.mkdir()
    (dumps / "3.jsonl").write_text(
        json.dumps({"input": "a b", "output": "b b b", "score": 1.0, "step": 3}) + "\n"
    )
    out = tmp_path / "t.csv"
    args = ["trace", "import", str(dumps), "--from", "verl", "--tokenizer", str(tmp_path / "tokenizer.json")]
    code, stdout, _ = _run(cli, [*args, "--out", str(out)])
    assert code == 0
    assert str(tmp_path / "tokenizer.json") in stdout
    row = next(csv.DictReader(out.open()))
    assert (row["step"], row["prompt_tokens"], row["output_tokens"]) == ("3", "2", "3")


def _one_stopped_dump(tmp_path: Path, record: dict[str, object] | None = None) -> list[str]:
    """A dump folder with one line whose output re-encodes to 3 tokens; the import's arguments."""
    write_word_tokenizer(tmp_path / "tokenizer.json", ["[UNK]", "a", "b"])
    (tmp_path / "rollouts").mkdir()
    record = record or {"input": "a b", "output": "b b b", "score": 1.0, "step": 3}
    (tmp_path / "rollouts" / "3.jsonl").write_text(json.dumps(record) + "\n")
    tokenizer = str(tmp_path / "tokenizer.json")
    return [
        "trace",
        "import",
        str(tmp_path / "rollouts"),
        "--tokenizer",
        tokenizer,
        "--out",
        str(tmp_path / "t.csv"),
    ]


@pytest.mark.parametrize(("flags", "tokens"), [([], "4"), (["--count-eos"], "4"), (["--no-count-eos"], "3")])
def test_trace_import_verl_counts_a_stopped_outputs_eos_unless_told_not_to(
    cli: typer.Typer, tmp_path: Path, flags: list[str], tokens: str
) -> None:
    code, _, _ = _run(cli, [*_one_stopped_dump(tmp_path), "--max-new-tokens", "8", *flags])
    assert code == 0
    row = next(csv.DictReader((tmp_path / "t.csv").open()))
    assert (row["output_tokens"], row["finish_reason"]) == (tokens, "stop")


def test_trace_import_verl_refuses_count_eos_without_the_cap_that_tells_stopped_from_truncated(
    cli: typer.Typer, tmp_path: Path
) -> None:
    code, _, err = _run(cli, [*_one_stopped_dump(tmp_path), "--count-eos"])
    assert code == 2
    assert "count-eos" in err
    assert "needs --max-new-tokens" in err
    assert len(err.strip().splitlines()) == 1


def test_trace_import_verl_refuses_a_validation_dump_in_one_line(cli: typer.Typer, tmp_path: Path) -> None:
    record = {"input": "a b", "output": "b", "score": 1.0, "step": 3, "reward": 1.0}
    code, _, err = _run(cli, _one_stopped_dump(tmp_path, record))
    assert code == 2
    assert "3.jsonl:1" in err
    assert "validation_data_dir" in err
    assert len(err.strip().splitlines()) == 1


def test_trace_import_verl_keeps_only_the_extra_fields_named_by_keep_field(
    cli: typer.Typer, tmp_path: Path
) -> None:
    write_word_tokenizer(tmp_path / "tokenizer.json", ["[UNK]", "a", "b"])
    dumps = tmp_path / "rollouts"
    dumps.mkdir()
    record = {"input": "a", "output": "b b", "score": 1.0, "step": 1, "acc": 1.0, "level": "easy"}
    (dumps / "1.jsonl").write_text(json.dumps(record) + "\n")
    out = tmp_path / "t.csv"
    args = ["trace", "import", str(dumps), "--tokenizer", str(tmp_path / "tokenizer.json")]
    code, _, _ = _run(cli, [*args, "--keep-field", "level", "--out", str(out)])
    assert code == 0
    row = next(csv.DictReader(out.open()))
    assert row["level"] == "easy"
    assert "acc" not in row


def test_trace_import_verl_without_a_tokenizer_is_refused(cli: typer.Typer, tmp_path: Path) -> None:
    code, _, err = _run(cli, ["trace", "import", str(tmp_path), "--out", str(tmp_path / "t.csv")])
    assert code != 0
    assert "tokenizer" in err


def test_a_step_range_past_the_trace_selects_only_the_steps_it_has(
    cli: typer.Typer, small_trace_file: Path
) -> None:
    args = ["replay", str(small_trace_file), "--workers", "1xH100", "--steps", "2-300000000", "--json"]
    code, out, _ = _run(cli, [*args, *FAST, *IN_PROCESS])
    assert code == 0
    assert json.loads(out)["steps"] == [2]


@pytest.mark.parametrize("command", [["replay"], ["trace", "import"]])
def test_a_trace_that_is_not_utf8_is_one_line_and_exit_2(
    cli: typer.Typer, tmp_path: Path, command: list[str]
) -> None:
    path = tmp_path / "latin1.csv"
    path.write_bytes(b"step,prompt_id,sample_idx,prompt_tokens,output_tokens\n0,caf\xe9,0,10,100\n")
    options = {
        "replay": ["--workers", "1xH100"],
        "trace": ["--from", "csv", "--out", str(tmp_path / "o.csv")],
    }
    code, _, err = _run(cli, [*command, str(path), *options[command[0]]])
    assert code == 2
    assert "not UTF-8" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("drift", ["nan", "inf", "5"])
def test_trace_synth_refuses_a_drift_that_is_no_number_of_tokens(
    cli: typer.Typer, tmp_path: Path, drift: str
) -> None:
    out = tmp_path / "x.csv"
    code, _, err = _run(
        cli, ["trace", "synth", "--prompts", "2", "--steps", "1", "--drift", drift, "--out", str(out)]
    )
    assert code == 2
    assert "drift" in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--max-new-tokens", "50"], "max-new-tokens"),
        (["--tokenizer", "t.json"], "tokenizer"),
        (["--keep-field", "level"], "keep-field"),
    ],
)
def test_trace_import_refuses_an_option_the_input_kind_would_ignore(
    cli: typer.Typer, tmp_path: Path, extra: list[str], needle: str
) -> None:
    path = tmp_path / "t.csv"
    path.write_text("step,prompt_id,sample_idx,prompt_tokens,output_tokens\n0,a,0,10,100\n")
    code, _, err = _run(
        cli, ["trace", "import", str(path), "--from", "csv", *extra, "--out", str(tmp_path / "o.csv")]
    )
    assert code == 2
    assert needle in err


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--from", "VERL", "--tokenizer", "t.json"], "from='VERL': expected one of verl, csv"),
        (["--map", "step=epoch"], "only --from csv|jsonl|parquet takes --map (--from defaults to verl)"),
        ([], "--from verl (the default) needs --tokenizer"),
    ],
)
def test_trace_import_names_the_input_kind_when_that_is_the_mistake(
    cli: typer.Typer, tmp_path: Path, extra: list[str], needle: str
) -> None:
    path = tmp_path / "t.csv"
    path.write_text("epoch,prompt_id,sample_idx,prompt_tokens,output_tokens\n0,a,0,10,100\n")
    code, _, err = _run(cli, ["trace", "import", str(path), *extra, "--out", str(tmp_path / "o.csv")])
    assert code == 2
    assert needle in err
    assert len(err.strip().splitlines()) == 1


def test_an_unwritable_report_path_is_refused_before_the_replay_runs(
    cli: typer.Typer, small_trace_file: Path, tmp_path: Path
) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("")
    args = ["replay", str(small_trace_file), "--workers", "1xH100", "--report", str(blocker / "r.html")]
    code, out, err = _run(cli, [*args, "--json", *FAST])
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
    code, out, err = _run(cli, ["replay", str(small_trace_file), "--workers", "1xH100", option, str(target)])
    assert code == 2
    assert "exists and cannot be overwritten" in err
    assert out == ""  # no replay ran
    assert target.read_text() == "kept"


def test_a_directory_given_as_the_trace_is_called_a_directory(cli: typer.Typer, tmp_path: Path) -> None:
    folder = tmp_path / "trace.csv"
    folder.mkdir()
    code, _, err = _run(cli, ["replay", str(folder), "--workers", "1xH100"])
    assert code == 2
    assert "is a directory" in err
    assert "no such file" not in err


def test_trace_synth_into_a_directory_names_the_out_option_not_a_temporary_file(
    cli: typer.Typer, tmp_path: Path
) -> None:
    folder = tmp_path / "dir.csv"
    folder.mkdir()
    code, _, err = _run(cli, ["trace", "synth", "--prompts", "2", "--samples", "2", "--out", str(folder)])
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
    code, _, err = _run(cli, [*args, "--plot", str(png), "--report", str(page), *FAST, *IN_PROCESS])
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
    code, out, err = _run(cli, [*args, "--report", str(both), "--json", *FAST, *IN_PROCESS])
    assert code == 2
    assert out == ""
    assert err.strip() == f"replay: report={str(both)!r}: is also --plot's path"
    assert not both.parent.exists()


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["trace", "import", "{dumps}", "--tokenizer", "{folder}", "--out", "{o}"],
         "trace: tokenizer='{folder}': is a directory, not a tokenizer.json"),
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
    code, _, err = _run(cli, [a.format(**names) for a in args])
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
    code, out, err = _run(cli, ["replay", str(small_trace_file), "--workers", "1xH100", option, str(target)])
    assert code == 2
    assert out == ""  # no replay ran
    assert err.splitlines() == [f"replay: {option[2:]}={str(target)!r}: {reason}"]
    assert not target.parent.exists()


def test_a_pool_past_the_service_s_worker_limit_is_one_line_before_any_work(
    cli: typer.Typer, small_trace_file: Path
) -> None:
    """``--workers 100000xH100`` ran for over ten minutes; the service takes 4,096 workers at most."""
    code, out, err = _run(cli, ["replay", str(small_trace_file), "--workers", "100000xH100"])
    assert code == 2
    assert out == ""
    (line,) = err.splitlines()
    assert line.startswith("replay: workers='100000xH100': 100,000 workers exceed the limit of "), line
    assert line.endswith(" workers (POST /schedule's too)"), line

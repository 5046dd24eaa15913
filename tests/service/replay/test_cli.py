"""``replay``: useful output on good input, one clear line on bad input (``trace``: test_trace_cli.py;
paths checked before the work: test_paths_checked_before_work.py)."""

from __future__ import annotations

import base64
import csv
import json
import stat
from pathlib import Path

import pytest
import typer

from tests.service.replay.clirun import FAST, IN_PROCESS, run


def test_replay_json_reports_the_bound_and_each_policy(cli: typer.Typer, small_trace_file: Path) -> None:
    code, out, _ = run(
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
    code, out, _ = run(
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
    code, _, _ = run(cli, [*args, "--plot", str(png), "--report", str(page), *FAST, *IN_PROCESS])
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
        (["--workers", "2xH100", "--steps", "1,5"], "steps='1,5': 5 selects no step of the trace"),
    ],
)
def test_bad_replay_input_is_one_line_on_stderr_and_a_nonzero_exit(
    cli: typer.Typer, small_trace_file: Path, args: list[str], needle: str
) -> None:
    code, _, err = run(cli, ["replay", str(small_trace_file), *args, *FAST])
    assert code != 0
    assert needle in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_a_trace_without_required_columns_is_refused_by_name(cli: typer.Typer, tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    with path.open("w", newline="") as handle:
        csv.writer(handle).writerows([["step", "prompt_id", "sample_idx"], [0, "a", 0]])
    code, _, err = run(cli, ["replay", str(path), "--workers", "1xH100"])
    assert code != 0
    assert "prompt_tokens" in err
    assert len(err.strip().splitlines()) == 1


def test_a_step_range_past_the_trace_selects_only_the_steps_it_has(
    cli: typer.Typer, small_trace_file: Path
) -> None:
    args = ["replay", str(small_trace_file), "--workers", "1xH100", "--steps", "2-300000000", "--json"]
    code, out, _ = run(cli, [*args, *FAST, *IN_PROCESS])
    assert code == 0
    assert json.loads(out)["steps"] == [2]


def test_a_pool_past_the_service_s_worker_limit_is_one_line_before_any_work(
    cli: typer.Typer, small_trace_file: Path
) -> None:
    """``--workers 100000xH100`` ran for over ten minutes; the service takes 4,096 workers at most."""
    code, out, err = run(cli, ["replay", str(small_trace_file), "--workers", "100000xH100"])
    assert code == 2
    assert out == ""
    (line,) = err.splitlines()
    assert line.startswith("replay: workers='100000xH100': 100,000 workers exceed the limit of "), line
    assert line.endswith(" workers (POST /schedule's too)"), line


@pytest.mark.parametrize(("steps", "noted"), [("0-1", True), ("1-2", False)])
def test_a_replay_of_the_trace_s_first_step_says_its_plans_had_no_history_to_learn_from(
    cli: typer.Typer, small_trace_file: Path, tmp_path: Path, steps: str, noted: bool
) -> None:
    # a replay without --steps plays the first step too, planned on the length prior alone, and its
    # figures were summed with the learned steps' without a word (on math100, round_robin beat cpsat)
    page = tmp_path / "report.html"
    args = ["replay", str(small_trace_file), "--workers", "2xH100", "--policies", "lpt", "--steps", steps]
    code, out, _ = run(cli, [*args, "--report", str(page), *FAST, *IN_PROCESS])
    assert code == 0
    note = (
        "step 0 is the trace's first: no earlier step to learn lengths from, so its length-aware plans "
        "used the length prior alone; --steps 1- leaves it out"
    )
    assert (note in " ".join(out.split())) is noted
    assert ("step 0: 48 trajectories" in page.read_text()) is noted
    assert ("(no earlier step to learn from: planned on the length prior)" in page.read_text()) is noted

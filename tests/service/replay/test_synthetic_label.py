"""A replay of a synthetic trace says so in every output: the table's title, the JSON and the HTML
report. Before, a replay of ``trace synth``'s output printed the same headline as a recorded run's,
though every row of the trace carries ``source=synthetic`` for just this purpose."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import typer
from PIL import Image

from predictors.synthetic import is_synthetic
from predictors.tracetable import Trace
from predictors.tracewrite import write_trace
from tests.service.replay.clirun import FAST, IN_PROCESS, run

REPLAY = ["--workers", "2xH100", "--policies", "lpt", "--steps", "1", *FAST, *IN_PROCESS]


def _recorded(trace: Trace, path: Path) -> Path:
    """The same rows without the generator's label, as a recorded run's trace, written to ``path``."""
    write_trace(dataclasses.replace(trace, categorical={}), path)
    return path


def test_a_trace_is_synthetic_when_its_rows_carry_the_generator_s_label(small_trace: Trace) -> None:
    assert is_synthetic(small_trace)
    assert not is_synthetic(dataclasses.replace(small_trace, categorical={}))


def test_a_replay_of_a_synthetic_trace_says_so_in_its_table_json_and_report(
    cli: typer.Typer, small_trace_file: Path, tmp_path: Path
) -> None:
    report = tmp_path / "replay.html"
    code, table, _ = run(cli, ["replay", str(small_trace_file), *REPLAY, "--report", str(report)])
    assert code == 0
    assert "SYNTHETIC trace, step 1:" in table
    assert "SYNTHETIC trace, step 1:" in report.read_text()
    code, out, _ = run(cli, ["replay", str(small_trace_file), *REPLAY, "--json"])
    assert code == 0
    assert json.loads(out)["synthetic"] is True


def test_a_replay_of_a_recorded_trace_carries_no_synthetic_label(
    cli: typer.Typer, small_trace: Trace, tmp_path: Path
) -> None:
    recorded = _recorded(small_trace, tmp_path / "recorded.csv")
    code, table, _ = run(cli, ["replay", str(recorded), *REPLAY])
    assert code == 0
    assert "SYNTHETIC" not in table
    code, out, _ = run(cli, ["replay", str(recorded), *REPLAY, "--json"])
    assert json.loads(out)["synthetic"] is False


def test_the_json_names_the_pool_and_every_setting_its_figures_depend_on(
    cli: typer.Typer, small_trace_file: Path
) -> None:
    # The table's title named the pool, model and stealing mode; the JSON only the stealing mode, and
    # none of them the admission, budget, clock or seed, which move the length-aware figures as much.
    args = ["--workers", "2xH100:64,1xA100", "--policies", "lpt", "--steps", "1", *IN_PROCESS, "--json"]
    for flag, admission, engine in (
        ("--kv-admission", True, "vllm-v0"),
        ("--no-kv-admission", False, "vllm-v1"),
    ):
        code, out, _ = run(
            cli, ["replay", str(small_trace_file), *args, flag, "--engine", engine, "--seed", "3", *FAST]
        )
        assert code == 0
        settings = {k: v for k, v in json.loads(out).items() if k not in ("policies", "lower_bound_s")}
        assert settings == {
            "synthetic": True,
            "workers": "2xH100:64,1xA100-80GB",
            "model": "7b",
            "time_budget_s": 0.2,
            "wall_clock": False,
            "seed": 3,
            "steal": True,
            "kv_admission": admission,
            "engine": engine,
            "steps": [1],
            "trajectories": 48,
        }


def test_the_gantt_chart_names_its_step_pool_model_and_a_synthetic_trace(
    cli: typer.Typer, small_trace_file: Path, tmp_path: Path
) -> None:
    # The chart, a file of its own, was titled "step 1: trajectories per worker (stealing on)":
    # no pool, no model, no word that the trace was generated.
    chart = tmp_path / "gantt.png"
    args = ["--workers", "2xH100:64", "--policies", "lpt", "--steps", "1", *FAST, *IN_PROCESS]
    code, _, _ = run(cli, ["replay", str(small_trace_file), *args, "--plot", str(chart)])
    assert code == 0
    assert Image.open(chart).info["Title"] == (
        "SYNTHETIC trace, step 1 on 2xH100:64 (7b): trajectories per worker (stealing on)"
    )


def test_the_per_worker_table_of_a_synthetic_trace_says_so_in_its_own_title(
    cli: typer.Typer, small_trace: Trace, small_trace_file: Path, tmp_path: Path
) -> None:
    # Issue 6: "labelled synthetic in every output it writes". --per-worker's table is an output of its
    # own (read alone, pasted alone), and its title was "lpt, worker by worker ..." on either trace.
    code, out, _ = run(cli, ["replay", str(small_trace_file), *REPLAY, "--per-worker", "lpt"])
    assert code == 0
    (title,) = [line for line in out.splitlines() if "worker by worker" in line]
    assert "SYNTHETIC trace, lpt, worker by worker" in title, out
    recorded = _recorded(small_trace, tmp_path / "recorded.csv")
    code, out, _ = run(cli, ["replay", str(recorded), *REPLAY, "--per-worker", "lpt"])
    assert code == 0
    assert "SYNTHETIC" not in out
    assert "lpt, worker by worker" in out

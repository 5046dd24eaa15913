"""Walk-forward evaluation: the issue's targets on real data and on drifting traces, and its CLI."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from predictors.evaluate import PREDICTORS, evaluate, score_step
from predictors.traceio import read_trace
from predictors.tracetable import Trace
from predictors.tracewrite import write_trace
from scheduler.trace import TraceRow
from tests.predictors.helpers import drifting_trace


@pytest.mark.realdata
def test_on_real_math_data_lightgbm_beats_the_prompt_mean_and_covers_p90(shared_data: Path) -> None:
    result = evaluate(read_trace(shared_data / "math100_x8.trace.csv"))
    assert [s.step for s in result.steps] == [1]
    gbm, mean = result.mean["lightgbm"], result.mean["prompt_history_mean"]
    assert mean.mae == pytest.approx(56.3, abs=0.05)  # the data README's reference figure
    assert gbm.mae <= mean.mae
    assert gbm.spearman >= 0.87
    assert 0.85 <= gbm.p90_coverage <= 0.95


def test_under_length_drift_lightgbm_cuts_mae_by_at_least_15_percent() -> None:
    # Six scored steps: the history mean lags by the drift it has accumulated, so the gain grows with
    # the steps (refitted generator, seeds 0-5: 13-20% at four scored steps, 20-30% at six; `bench
    # predictor-drift`, nine scored steps, 32%). Four scored steps put seed 3 at 13%.
    result = evaluate(drifting_trace(prompts=80, samples=8, steps=7, drift=0.05))
    gbm, mean = result.mean["lightgbm"], result.mean["prompt_history_mean"]
    assert gbm.mae <= 0.85 * mean.mae


def test_every_baseline_is_clipped_to_the_cap_of_the_step_it_scores() -> None:
    # The cap is cut from 1000 to 200 at step 2: global_mean used to predict 1000 (MAE 800 here)
    # while the serving predictors were clipped to [1, cap].
    rows = [
        TraceRow(step, f"p{p}", i, 10, 1000 if step < 2 else 200, 1000 if step < 2 else 200)
        for step in range(3)
        for p in range(3)
        for i in range(4)
    ]
    scores = score_step(Trace.from_rows(rows), 2).scores
    assert {name: s.mae for name, s in scores.items()} == dict.fromkeys(PREDICTORS, 0.0)


def test_eval_json_has_every_predictor_and_metric(cli: typer.Typer, tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write_trace(drifting_trace(prompts=30, steps=3), path)
    result = CliRunner().invoke(cli, ["predictor", "eval", str(path), "--json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(data["predictors"]) == {"global_mean", "prompt_history_mean", "lightgbm"}
    for metrics in data["predictors"].values():
        assert set(metrics) == {"mae", "mape", "spearman", "kendall", "p90_coverage"}
    assert [s["step"] for s in data["steps"]] == [1, 2]


def test_eval_off_a_terminal_writes_nothing_to_stderr(cli: typer.Typer, tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    write_trace(drifting_trace(prompts=10, steps=3), path)  # over 2 steps: the progress bar's path
    result = CliRunner().invoke(cli, ["predictor", "eval", str(path), "--json"])
    assert result.exit_code == 0
    assert result.stderr == ""


class _Terminal(io.StringIO):
    """A stderr that is a terminal, as a user's shell is (CliRunner's never is)."""

    def isatty(self) -> bool:
        return True


def test_eval_on_a_terminal_shows_a_progress_bar_of_the_steps_it_scores(
    cli: typer.Typer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The issue asks for a progress bar on long runs: each scored step is a fit.
    path = tmp_path / "t.csv"
    write_trace(drifting_trace(prompts=10, steps=3), path)
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    typer.main.get_command(cli).main(["predictor", "eval", str(path), "--json"], standalone_mode=False)
    shown = terminal.getvalue()
    assert "scoring steps" in shown
    assert "2/2" in shown  # steps 1 and 2 scored, each fitted on the ones before


def test_eval_of_a_single_step_says_only_fallbacks_apply(cli: typer.Typer, tmp_path: Path) -> None:
    path = tmp_path / "one.csv"
    trace = drifting_trace(prompts=10, steps=1)
    write_trace(trace, path)
    result = CliRunner().invoke(cli, ["predictor", "eval", str(path)])
    assert result.exit_code == 0
    assert "only" in result.stdout
    assert "fallbacks" in result.stdout


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("", "empty"),
        ("step,prompt_id,sample_idx,prompt_tokens,output_tokens\n", "no rows"),
        ("step,prompt_id,sample_idx,prompt_tokens\n0,a,0,5\n", "output_tokens"),
        ("step,prompt_id,sample_idx,prompt_tokens,output_tokens\n0,a,0,5,-4\n", ":2:output_tokens"),
        ("step,prompt_id,sample_idx,prompt_tokens,output_tokens\n0,a,0,5,4.5\n", ":2:output_tokens"),
        (
            "step,prompt_id,sample_idx,prompt_tokens,output_tokens\n0,a,0,5,0\n",
            ":2:output_tokens='0': must be >= 1: a generation is at least the token it ended on",
        ),
        ("step,prompt_id,sample_idx,prompt_tokens,output_tokens,reward\n0,a,0,5,4,nan\n", ":2:reward"),
    ],
)
def test_bad_traces_get_one_line_and_a_nonzero_exit(
    cli: typer.Typer, tmp_path: Path, body: str, needle: str
) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(body)
    for command in (
        ["predictor", "eval", str(path)],
        ["predictor", "train", str(path), "--out", str(tmp_path)],
    ):
        result = CliRunner().invoke(cli, command)
        assert result.exit_code == 2
        assert needle in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        assert "Traceback" not in result.stderr + result.stdout


def test_train_writes_a_version_with_its_holdout_score(cli: typer.Typer, tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    trace = drifting_trace(prompts=30, steps=3)
    write_trace(trace, path)
    result = CliRunner().invoke(cli, ["predictor", "train", str(path), "--out", str(tmp_path / "store")])
    assert result.exit_code == 0, result.stderr
    meta = json.loads((tmp_path / "store" / "v000001" / "metadata.json").read_text())
    assert meta["steps"] == [0, 1, 2]
    assert meta["training_rows"] == 30 * 4 * 3
    walked = evaluate(trace).steps[-1].scores["lightgbm"]  # step 2 fitted on steps 0 and 1, as eval does
    assert meta["metrics"]["holdout_mae"] == walked.mae


def test_a_store_that_cannot_be_written_is_one_line_naming_out_and_leaves_no_folder(
    cli: typer.Typer, tmp_path: Path
) -> None:
    """A store name longer than the file system takes passes the check (its folder does not exist yet)
    and failed once written: "[Errno 36] File name too long", without --out, and the folders stayed."""
    path = tmp_path / "t.parquet"
    write_trace(drifting_trace(prompts=10, steps=2), path)
    out = tmp_path / "new" / ("m" * 300)
    result = CliRunner().invoke(cli, ["predictor", "train", str(path), "--out", str(out)])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"predictor train: out={str(out)!r}: cannot be written: File name too long"
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["t.parquet"]

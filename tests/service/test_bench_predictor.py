"""``rollout-scheduler bench predictor`` fits the size it is asked for, or says why it cannot; ``bench
predictor-drift --rotate`` scores the steps where rotating prompts come back."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner


@pytest.mark.parametrize("rows", ["1", "0", "63"])
def test_fewer_rows_than_one_prompt_takes_are_refused_naming_the_flag_its_value_and_the_minimum(
    cli: typer.Typer, rows: str
) -> None:
    """``--rows 1`` had fitted 64 rows (one prompt at each of 8 steps x 8 samples) without a word."""
    result = CliRunner().invoke(cli, ["bench", "predictor", "--rows", rows, "--json"])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"bench predictor: --rows={rows}: must be >= 64 (one prompt: --steps 8 x --samples 8 rows)"
    ]
    assert result.stdout == ""


def test_the_minimum_follows_steps_and_samples(cli: typer.Typer) -> None:
    args = ["bench", "predictor", "--rows", "5", "--steps", "2", "--samples", "3"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert result.stderr.startswith("bench predictor: --rows=5: must be >= 6 ")


def test_predictor_drift_with_rotate_scores_the_steps_where_prompts_first_come_back(cli: typer.Typer) -> None:
    """``--rotate K`` runs each prompt every K-th step; the report adds the scores of steps K to
    2K - 1 (each prompt's first run back) and of the later ones, so the first recurrence's figure
    is one command away."""
    args = ["bench", "predictor-drift", "--prompts", "16", "--samples", "2", "--steps", "5", "--rotate", "2"]
    result = CliRunner().invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["rotate"], report["rows"]) == (2, 16 * 2 * 5 // 2)
    predictors = {"global_mean", "prompt_history_mean", "lightgbm"}
    assert set(report["first_recurrence"]) == set(report["later_recurrences"]) == predictors
    assert report["first_recurrence"] != report["later_recurrences"]
    text = CliRunner().invoke(cli, args).stdout
    assert "first_recurrence (every prompt runs every 2 steps):" in text


def test_predictor_drift_without_rotate_runs_every_prompt_at_every_step(cli: typer.Typer) -> None:
    args = ["bench", "predictor-drift", "--prompts", "16", "--samples", "2", "--steps", "3", "--json"]
    report = json.loads(CliRunner().invoke(cli, args).stdout)
    assert report["rows"] == 16 * 2 * 3
    assert "rotate" not in report
    assert "first_recurrence" not in report

"""``rollout-scheduler bench predictor`` fits the size it is asked for, or says why it cannot."""

from __future__ import annotations

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

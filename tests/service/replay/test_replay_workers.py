"""The per-worker breakdown: it explains a replayed plan's finish from what each worker ran."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from predictors.tracetable import Trace
from scheduler.errors import InvalidInputError
from service.replay.harness import ORACLE, ReplayConfig, ReplayReport, replay
from service.replay.workers import worker_rows
from service.workerspec import parse_workers

POOL = parse_workers("2xH100,1xAscend910B", model="7b")


@pytest.fixture(scope="module")
def report(small_trace: Trace) -> ReplayReport:
    config = ReplayConfig(POOL, ("lpt", ORACLE), (2,), steal_modes=(False,), time_budget_s=0.2)
    return replay(small_trace, config)


def test_every_worker_has_one_row_and_the_rows_hold_every_trajectory(report: ReplayReport) -> None:
    step = report.steps[0]
    rows = worker_rows(step, "lpt", False, POOL)
    assert [r.worker_id for r in rows] == [w.worker_id for w in POOL.workers]
    assert sum(r.trajectories for r in rows) == step.trajectories
    assert max(r.simulated_finish_s for r in rows) == pytest.approx(
        step.runs[("lpt", False)].result.makespan_s
    )


def test_on_true_lengths_the_area_is_as_planned_and_the_plan_is_kept(report: ReplayReport) -> None:
    for row in worker_rows(report.steps[0], ORACLE, False, POOL):
        assert row.area_ratio == pytest.approx(1.0)
        assert row.simulated_finish_s == pytest.approx(row.planned_finish_s, rel=1e-6)
        assert 0.0 < row.kv_use <= 1.0
        assert 0.0 <= row.last_start_s < row.simulated_finish_s


def test_on_predicted_lengths_the_area_error_is_measured(report: ReplayReport) -> None:
    ratios = [r.area_ratio for r in worker_rows(report.steps[0], "lpt", False, POOL)]
    assert any(abs(r - 1.0) > 1e-3 for r in ratios)  # the predictor is not exact on this trace


def test_a_policy_that_was_not_replayed_is_refused_by_name(report: ReplayReport) -> None:
    with pytest.raises(InvalidInputError, match=r"per_worker.*cpsat"):
        worker_rows(report.steps[0], "cpsat", False, POOL)


def _run(cli: typer.Typer, args: list[str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, args)
    return result.exit_code, result.stdout, result.stderr


def test_replay_json_carries_the_per_worker_rows(cli: typer.Typer, small_trace_file: Path) -> None:
    args = ["replay", str(small_trace_file), "--workers", "2xH100,1xAscend910B", "--steps", "1-2"]
    options = ["--policies", "lpt", "--per-worker", "lpt", "--json", "--time-budget", "0.2"]
    code, out, _ = _run(cli, [*args, *options, "--processes", "1"])  # a pool changes no number
    assert code == 0
    rows = json.loads(out)["per_worker"]
    assert len(rows) == 2 * len(POOL.workers)
    assert {r["step"] for r in rows} == {1, 2}
    assert {"planned_finish_s", "simulated_finish_s", "area_ratio", "kv_use", "last_start_s"} <= set(rows[0])


def test_per_worker_for_a_policy_not_replayed_is_one_line_and_exit_2(
    cli: typer.Typer, small_trace_file: Path
) -> None:
    args = [
        "replay",
        str(small_trace_file),
        "--workers",
        "2xH100",
        "--policies",
        "lpt",
        "--per-worker",
        "cpsat",
    ]
    code, _, err = _run(cli, args)
    assert code == 2
    assert err.strip().count("\n") == 0
    assert "per_worker" in err
    assert "cpsat" in err

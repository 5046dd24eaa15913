"""``rollout-scheduler bench solver --json`` reports every policy at each size with the promised fields."""

from __future__ import annotations

import json

import typer
from typer.testing import CliRunner

from scheduler.benchgen import bench_request
from service.commands import bench_solver


def _cli() -> typer.Typer:
    app, bench = typer.Typer(), typer.Typer()
    app.add_typer(bench, name="bench")
    bench_solver.register(app, bench)
    return app


def test_bench_solver_json_lists_every_policy_with_wall_time_and_bound_ratio() -> None:
    result = CliRunner().invoke(
        _cli(), ["bench", "solver", "--json", "--repeats", "1", "--max-trajectories", "1024"]
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["results"]
    assert {r["policy"] for r in rows} == {"round_robin", "least_loaded", "lpt", "cpsat"}
    for row in rows:
        assert (row["trajectories"], row["workers"]) == (1024, 16)
        assert 0 < row["wall_ms_p50"] <= row["wall_ms_p95"]
        assert row["makespan_over_lower_bound"] >= 1.0
        assert row["refined_bound_s"] >= row["lower_bound_s"]  # tighter, never looser
        assert 1.0 <= row["makespan_over_refined_bound"] <= row["makespan_over_lower_bound"]
    by_policy = {r["policy"]: r for r in rows}
    assert by_policy["cpsat"]["makespan_s"] <= by_policy["lpt"]["makespan_s"]


def test_bench_solver_prints_a_table_by_default() -> None:
    result = CliRunner().invoke(_cli(), ["bench", "solver", "--repeats", "1", "--max-trajectories", "1024"])
    assert result.exit_code == 0, result.output
    assert "cpsat" in result.output
    assert "p95 ms" in result.output


def test_bench_solver_refuses_a_max_trajectories_below_every_size() -> None:
    result = CliRunner().invoke(_cli(), ["bench", "solver", "--max-trajectories", "10"])
    assert result.exit_code == 2
    assert result.stderr.strip() == "bench solver: --max-trajectories 10 is below the smallest size, 1024"
    assert result.stdout == ""


def test_bench_solver_with_a_speed_spread_plans_on_learned_speeds_and_says_so() -> None:
    args = ["bench", "solver", "--json", "--repeats", "1", "--max-trajectories", "1024"]
    result = CliRunner().invoke(_cli(), [*args, "--speed-spread", "0.1"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["speed_spread"] == 0.1
    by_policy = {r["policy"]: r for r in report["results"]}
    assert by_policy["cpsat"]["makespan_s"] <= by_policy["lpt"]["makespan_s"]
    equal = {r["policy"]: r for r in json.loads(CliRunner().invoke(_cli(), args).output)["results"]}
    assert by_policy["round_robin"]["makespan_s"] != equal["round_robin"]["makespan_s"]  # other speeds


def test_bench_solver_says_the_plan_budget_its_figures_had() -> None:
    # A --budget run printed the same heading and JSON as a run at the targets, though its ratios
    # and statuses depend on the budget.
    args = ["bench", "solver", "--repeats", "1", "--max-trajectories", "1024"]
    result = CliRunner().invoke(_cli(), [*args, "--budget", "0.05"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0].endswith("; plan budget 50 ms")
    default = CliRunner().invoke(_cli(), args)
    assert default.output.splitlines()[0].endswith(
        "; plan budget 250 ms to 4,096 trajectories, 1 s above (the targets)"
    )
    report = json.loads(CliRunner().invoke(_cli(), [*args, "--json", "--budget", "0.05"]).output)
    assert {r["budget_ms"] for r in report["results"]} == {50.0}


def test_the_solver_tables_say_their_p95_over_five_plans_is_the_slowest_of_them() -> None:
    # docs/benchmarks.md's "wall p95 ms" over 5 repeats is the maximum: the table did not say so
    from service.commands.bench_solver import _nearest_rank, percentile_note

    walls = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert _nearest_rank(walls, 95) == max(walls)
    assert "nearest rank over the 5 plans of a size and policy: the slowest of them" in percentile_note(5)
    assert "the 19th fastest of them" in percentile_note(20)
    assert _nearest_rank([float(i) for i in range(1, 21)], 95) == 19.0


def test_bench_solver_with_a_p90_ratio_plans_batches_with_quantiles_and_says_so() -> None:
    args = ["bench", "solver", "--json", "--repeats", "1", "--max-trajectories", "1024"]
    result = CliRunner().invoke(_cli(), [*args, "--p90-ratio", "1.6"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["p90_ratio"] == 1.6
    assert {r["policy"] for r in report["results"]} == {"round_robin", "least_loaded", "lpt", "cpsat"}
    table = CliRunner().invoke(
        _cli(), ["bench", "solver", "--repeats", "1", "--max-trajectories", "1024", "--p90-ratio", "1.6"]
    )
    assert "p90 1.6x each prediction" in table.output


def test_bench_solver_plans_the_issues_sizes_on_a_half_h100_half_ascend_pool_within_its_budgets() -> None:
    """Issue 2 names the sizes (1,024 x 16 up to 32,768 x 256), the pool (half H100, half Ascend
    910B) and the wall-time targets the budgets must stay within (250 ms at 4,096 x 32, 1 s at
    32,768 x 256); the tests above run 1,024 x 16 only, so a size dropped or a pool changed went
    unnoticed until docs/benchmarks.md's table was rewritten."""
    assert bench_solver.SIZES == ((1_024, 16), (4_096, 32), (16_384, 128), (32_768, 256))
    assert bench_solver.BUDGET_S[4_096] <= 0.25
    assert bench_solver.BUDGET_S[32_768] <= 1.0
    request = bench_request(64, 8, seed=0)
    kinds = [w.device.name for w in request.inventory.workers]
    assert kinds == ["H100"] * 4 + ["Ascend910B"] * 4
    assert request.inventory.model.name == "7b"

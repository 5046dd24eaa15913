"""CP-SAT practice for every solve of the scheduler: limits that are never spent before the solve
starts, one seeded worker, and a rejected model reported, not swallowed by the fallback."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import pytest
from ortools.sat.python import cp_model

import scheduler
from scheduler.policies.sat import SEED_RANGE, new_solver, solve


def test_a_model_cp_sat_rejects_is_logged_as_an_error_with_its_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = cp_model.CpModel()
    model.new_int_var(0, -1, "N[0]")  # the empty domain a wrapped (negative) KV load once gave
    with caplog.at_level(logging.ERROR, logger="scheduler.policies.sat"):
        status = solve(new_solver(0.01, 0), model, "repair")
    assert status == cp_model.MODEL_INVALID  # still returned: the caller falls back
    [record] = caplog.records
    assert record.levelno == logging.ERROR
    assert "repair" in record.getMessage()
    assert "N[0]" in record.getMessage()


def test_a_solvable_model_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    """A limit of seconds, not 10 ms: the model solves in microseconds, but at host load 28 a 10 ms limit
    ran out before CP-SAT's presolve (review67), and a limit is not what this test is about."""
    model = cp_model.CpModel()
    model.minimize(model.new_int_var(3, 9, "T"))
    with caplog.at_level(logging.DEBUG, logger="scheduler.policies.sat"):
        assert solve(new_solver(5.0, 0), model, "repair") == cp_model.OPTIMAL
    assert not caplog.records


@pytest.mark.parametrize("left_s", [0.0, -0.5])
def test_a_spent_budget_still_gives_cp_sat_positive_limits_one_worker_and_a_folded_seed(
    left_s: float,
) -> None:
    """CP-SAT 9.15 answers UNKNOWN to a limit of 0 and MODEL_INVALID to a negative one (its parameters
    are checked like the model), so a solve started on a spent budget gets a small positive limit."""
    solver = new_solver(left_s, 2**40 + 7, wall_s=left_s)
    assert solver.parameters.max_deterministic_time > 0
    assert 0 < solver.parameters.max_time_in_seconds <= 0.01
    assert solver.parameters.num_workers == 1
    assert solver.parameters.random_seed == (2**40 + 7) % SEED_RANGE


def _direct_solves(path: Path) -> list[int]:
    """Lines of ``path`` that call ``.solve(...)`` / ``.Solve(...)`` on anything."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in {"solve", "Solve"}
    ]


def test_every_cp_sat_solve_in_the_scheduler_goes_through_sat_solve() -> None:
    core = Path(scheduler.__file__).parent
    direct = {str(p.relative_to(core)): _direct_solves(p) for p in core.rglob("*.py")}
    assert {name for name, lines in direct.items() if lines} == {"policies/sat.py"}
    assert len(direct["policies/sat.py"]) == 1  # ``solve`` itself

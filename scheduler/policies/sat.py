"""CP-SAT solver settings shared by every model of the ``cpsat`` policy.

Plans must be reproducible: the same request and seed give the same plan. CP-SAT's parallel
portfolio is not deterministic under a wall-clock limit, so each solve runs one search worker and
stops on a *deterministic* time limit (CP-SAT's work counter, about a second of work per unit on a
typical core); the wall-clock limit stays as a safety net that only an overloaded host reaches,
except under a frozen planning clock (``scheduler.clock``, the replay), where a plan must not depend
on the host at all. The models here are small by design (tens of integers, or a few thousand
booleans), where one worker with a good hint is as fast as a portfolio, and the host has 2 cores
shared with the service.

Every solve goes through ``solve``: callers fall back on any status but OPTIMAL/FEASIBLE, so a model
CP-SAT rejects (MODEL_INVALID) would cost only plan quality and pass unseen, yet it is always a
planner bug (a sum past the 64-bit guards, an empty domain from a wrapped load); it is logged as an
error with CP-SAT's own reason. And its search is stopped once the caller's hard deadline has passed
(``sat_watch``): the deadline is checked between the planner's parts, and a search is one part.
"""

from __future__ import annotations

import logging

from ortools.sat.python import cp_model

from scheduler import clock
from scheduler.policies.sat_watch import cut_at_deadline

WALL_SAFETY = 3.0  # wall-clock limit as a multiple of the deterministic limit
SEED_RANGE = 2**31  # CP-SAT's random_seed is an int32; larger request seeds are folded into it

_log = logging.getLogger(__name__)


def new_solver(limit_s: float, seed: int, wall_s: float | None = None) -> cp_model.CpSolver:
    """A single-worker, seeded solver that stops after ``limit_s`` deterministic seconds.

    ``wall_s`` (what is left of the caller's budget) caps the wall-clock safety net: a loaded host
    then stops the solve at the budget instead of up to ``WALL_SAFETY`` times past it. Under a frozen
    planning clock there is no wall-clock limit: only the deterministic one stops the solve.
    """
    solver = cp_model.CpSolver()
    limit = max(0.001, limit_s)
    solver.parameters.max_deterministic_time = limit
    if clock.solves_on_wall_clock():
        wall = limit * WALL_SAFETY if wall_s is None else min(limit * WALL_SAFETY, wall_s)
        solver.parameters.max_time_in_seconds = max(0.001, wall)
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = seed % SEED_RANGE  # the request's seed may be any int64
    # CP-SAT's own Ctrl-C catcher puts SIGINT back to SIG_DFL after every solve, not to what the
    # process had: a replay or bench worker that ignored it, or serve's and the CLI's KeyboardInterrupt
    # handling, would then be killed outright by the next Ctrl-C. A solve is bounded by its budget,
    # so Python's handler raising once the solve returns is soon enough.
    solver.parameters.catch_sigint_signal = False
    return solver


def solve(solver: cp_model.CpSolver, model: cp_model.CpModel, what: str) -> cp_model.CpSolverStatus:
    """``solver.solve(model)``; a MODEL_INVALID is logged as an error naming ``what`` and CP-SAT's
    reason (module doc), and returned like any other status for the caller's fallback. The search
    stops once the hard deadline has passed (``sat_watch``), returning what it had."""
    with cut_at_deadline(solver):
        status = solver.solve(model)
    if status == cp_model.MODEL_INVALID:
        reason = model.validate()
        _log.error("CP-SAT rejected the %s model as invalid (a planner bug; falling back): %s", what, reason)
    return status

"""The bench's 1,024 x 16 batch with quantiles (each p90 1.2x its prediction), and what the budget
tests of the robust choice and of its draws read of a plan: its problem, spread and lpt queues, and
each worker's point finish.

The robust-budget and draws-budget tests plan this request; they share it here rather than through
one test module's private names, so a change to it reaches both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from scheduler.benchgen import bench_request
from scheduler.policies.lpt import lpt_start
from scheduler.policies.problem import Problem, build_problem
from scheduler.policies.robust import Spread, spreads
from scheduler.types import PlanRequest


def with_quantiles(request: PlanRequest, ratio: float) -> PlanRequest:
    """``request`` with every trajectory's p50 its prediction and p90 ``ratio`` times that."""
    batch = tuple(
        dataclasses.replace(
            t, quantiles={0.5: t.predicted_tokens, 0.9: min(t.predicted_tokens * ratio, t.max_new_tokens)}
        )
        for t in request.trajectories
    )
    return dataclasses.replace(request, trajectories=batch)


REQUEST = with_quantiles(bench_request(1_024, 16, seed=0, time_budget_s=10.0), 1.2)


def lpt_plan(request: PlanRequest) -> tuple[Problem, Spread, tuple[tuple[int, ...], ...]]:
    """``request``'s problem, the spread of its quantiles and its lpt plan's queues."""
    problem, spread = build_problem(request), spreads(request.trajectories)
    assert spread is not None
    return problem, spread, lpt_start(problem, request.kv_admission, float("inf"), False)[1]


def point_finishes(problem: Problem, queues: Sequence[Sequence[int]], reserve: bool) -> tuple[float, ...]:
    """Each worker's point finish, as the search reports it with its plan."""
    return tuple(problem.finishes(queues, reserve))

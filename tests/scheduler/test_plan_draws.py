"""A plan draws the request's lengths once (``Problem.draws``), and every judgment that reads them
sees the rows it drew for itself before: the plans are the same.

Why: the at-once hedge, the bar's screen and weighing (``blindbar``), cpsat's baseline and the orders'
hedge each drew the same ``SAMPLES`` draws from the request's seed, ~4 ms a time at 4,096 x 32 inside
the service's 80 ms default (docs/experiments.md, budget51).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from scheduler import clock, lognormal
from scheduler.planner import plan
from scheduler.policies.plan_draws import SAMPLES, SeededDraws, draw_matrix
from scheduler.policies.problem import Problem, build_problem
from scheduler.policies.robust import Spread, spreads
from scheduler.types import PlanRequest
from tests.scheduler.mixed_requests import grouped_request, service_batch

BATCHES: dict[str, Callable[[], PlanRequest]] = {
    "service 24 x 8": lambda: service_batch(24, 8, seed=2),
    "short cot, KV admission": grouped_request,
    "three H100s and an Ascend": lambda: grouped_request(h100s=3, ascends=1),
}


def _spread(request: PlanRequest) -> Spread:
    spread = spreads(request.trajectories)
    assert spread is not None
    return spread


def _seeded_rows_drawn(monkeypatch: pytest.MonkeyPatch, request: PlanRequest, policy: str) -> int:
    """How many rows of the request's seeded draws (``draw_matrix(spread, default_rng(seed), ...)``)
    one plan drew, whichever module drew them: every ``bounded_lengths`` call's standard normal rows
    that are rows of that stream (the hedges' other draws, from other seeds, are not)."""
    stream = np.random.default_rng(request.seed).standard_normal((SAMPLES, len(request.trajectories)))
    known = {row.tobytes() for row in stream}
    drawn = [0]
    original = lognormal.bounded_lengths

    def counted(medians: Any, sigmas: Any, caps: Any, normal: npt.NDArray[np.float64]) -> Any:
        if normal.ndim == 2:
            drawn[0] += sum(row.tobytes() in known for row in normal)
        return original(medians, sigmas, caps, normal)

    for module in list(sys.modules.values()):  # wherever it was imported by name
        if getattr(module, "bounded_lengths", None) is original:
            monkeypatch.setattr(module, "bounded_lengths", counted)
    with clock.frozen():
        plan(request, policy)
    return drawn[0]


@pytest.mark.parametrize("policy", ["lpt", "cpsat"])
@pytest.mark.parametrize("batch", sorted(BATCHES))
def test_a_plan_draws_the_requests_lengths_once(
    batch: str, policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert 0 < _seeded_rows_drawn(monkeypatch, BATCHES[batch](), policy) <= SAMPLES


class _OwnDraws:
    """``Problem.draws`` as it was before: every judgment drawing its own from the request's seed."""

    @staticmethod
    def draws(_: Problem, spread: Spread, seed: int) -> SeededDraws:
        return SeededDraws(spread, seed)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("policy", ["lpt", "cpsat"])
@pytest.mark.parametrize("batch", sorted(BATCHES))
def test_the_shared_draws_give_the_plan_each_judgment_drawing_its_own_gave(
    batch: str, policy: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    request = dataclasses.replace(BATCHES[batch](), seed=seed)
    with clock.frozen():
        shared = plan(request, policy)
    monkeypatch.setattr(Problem, "draws", _OwnDraws.draws)
    with clock.frozen():
        own = plan(request, policy)
    assert dataclasses.replace(shared, wall_time_s=0.0) == dataclasses.replace(own, wall_time_s=0.0)


def test_the_plans_draws_are_the_rows_one_pass_draws_whatever_blocks_are_asked_first() -> None:
    request = service_batch(16, 8, seed=5)
    problem, spread = build_problem(request), _spread(request)
    whole = draw_matrix(spread, np.random.default_rng(request.seed), SAMPLES)
    drawn = problem.draws(spread, request.seed)
    assert np.array_equal(drawn.rows(4), whole[:4])  # the at-once hedge's first block
    assert np.array_equal(drawn.rows(12), whole[:12])
    assert np.array_equal(problem.draws(spread, request.seed).rows(SAMPLES), whole)  # the bar's
    assert problem.draws(spread, request.seed) is drawn


def test_the_plans_draws_are_read_only() -> None:
    request = grouped_request()
    problem, spread = build_problem(request), _spread(request)
    rows = problem.draws(spread, request.seed).rows(SAMPLES)
    with pytest.raises(ValueError, match="read-only"):
        rows[0, 0] = 0


def test_another_spread_or_seed_is_drawn_afresh() -> None:
    request = grouped_request()
    problem, spread = build_problem(request), _spread(request)
    drawn = problem.draws(spread, 0)
    other = _spread(request)  # equal values, another object: a spread of another plan
    assert problem.draws(other, 0) is not drawn
    assert problem.draws(other, 1) is not problem.draws(other, 0)
    assert not np.array_equal(problem.draws(other, 1).rows(4), problem.draws(other, 0).rows(4))


def test_draws_asked_past_samples_are_the_samples_draws_and_a_shorter_ask_the_first_of_them() -> None:
    request = service_batch(16, 8, seed=5)
    spread = _spread(request)
    whole = draw_matrix(spread, np.random.default_rng(request.seed), SAMPLES)
    drawn = SeededDraws(spread, request.seed)
    assert np.array_equal(drawn.rows(SAMPLES + 8), whole)
    assert drawn.drawn == SAMPLES
    assert np.array_equal(drawn.rows(4), whole[:4])

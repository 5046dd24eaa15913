"""The robust choice: a plan is judged by its makespan over draws of the lengths the quantiles allow."""

from __future__ import annotations

import time

import numpy as np

from scheduler.devices import device_profile, model_preset
from scheduler.finish import queue_finishes
from scheduler.policies.problem import Problem, build_problem
from scheduler.policies.robust import draw_matrix, draw_steps, least_expected, spreads
from scheduler.types import Inventory, PlanRequest, Trajectory, Worker

POOL = Inventory(tuple(Worker(f"h100-{i}", device_profile("H100")) for i in range(4)), model_preset("7b"))
LONG, SHORT = 4, 396  # as on math100: four long-predicted trajectories, the rest short


def _batch(short_spread: float) -> tuple[Trajectory, ...]:
    """Long ones predicted at 3,000 tokens, sure of it; short ones at 500, p90 at ``short_spread`` x."""
    long = [Trajectory(f"L{i}", 0, 300, 4_096, 3_000.0, {0.5: 3_000.0, 0.9: 3_100.0}) for i in range(LONG)]
    quantiles = {0.5: 500.0, 0.9: 500.0 * short_spread}
    short = [Trajectory(f"S{i}", 0, 300, 4_096, 500.0, quantiles) for i in range(SHORT)]
    return (*long, *short)


def _problem(batch: tuple[Trajectory, ...]) -> Problem:
    return build_problem(PlanRequest(batch, POOL, kv_admission=True))


CROWDED = ((0, 1), (2,), (3,), tuple(range(LONG, LONG + SHORT)))  # the long ones apart, the rest on one
EVEN = tuple(tuple(range(w, LONG + SHORT, 4)) for w in range(4))  # a hundred each, long ones spread


def test_without_a_p90_for_every_trajectory_there_is_nothing_to_draw_from() -> None:
    batch = _batch(2.0)
    assert spreads(batch) is not None
    assert spreads((*batch[:-1], Trajectory("x", 0, 10, 100, 50.0, {0.5: 50.0}))) is None
    assert spreads((*batch[:-1], Trajectory("x", 0, 10, 100, 50.0))) is None


def test_with_no_spread_every_draw_is_the_prediction_and_the_shorter_plan_wins() -> None:
    batch = _batch(1.0)
    problem, spread = _problem(batch), spreads(batch)
    assert spread is not None
    costs, prompts, steps = problem.costs, problem.prompts, problem.steps
    finishes = [max(queue_finishes(costs, prompts, steps, q, True)) for q in (CROWDED, EVEN)]
    assert finishes[0] < finishes[1]  # on the predictions, crowding the short ones is the better plan
    assert least_expected(problem, (CROWDED, EVEN), spread, True, 0, time.perf_counter() + 60) == 0


def test_a_crowded_worker_is_the_worse_bet_when_any_short_trajectory_may_run_long() -> None:
    batch = _batch(3.0)
    problem, spread = _problem(batch), spreads(batch)
    assert spread is not None
    deadline = time.perf_counter() + 60
    assert least_expected(problem, (CROWDED, EVEN), spread, True, 0, deadline) == 1
    assert least_expected(problem, (EVEN, CROWDED), spread, True, 0, deadline) == 0  # not the order


def test_no_choice_is_made_when_the_draws_would_not_fit_the_deadline() -> None:
    batch = _batch(3.0)
    problem, spread = _problem(batch), spreads(batch)
    assert spread is not None
    assert least_expected(problem, (CROWDED, EVEN), spread, True, 0, time.perf_counter()) is None


def test_the_draws_as_one_array_are_the_successive_draws_of_the_same_generator() -> None:
    spread = spreads(_batch(3.0))
    assert spread is not None
    one_by_one = np.random.default_rng(7)
    expected = [draw_steps(spread, one_by_one) for _ in range(5)]
    assert draw_matrix(spread, np.random.default_rng(7), 5).tolist() == expected

"""Order inside a worker: the wider search on the worker that finishes last (``refine_critical``)."""

from __future__ import annotations

import time

import pytest

from scheduler.benchgen import heavy_tailed_batch, mixed_inventory
from scheduler.finish import worker_finish
from scheduler.policies.lpt import lpt_assignment
from scheduler.policies.ordering import order_queues, refine_critical
from scheduler.policies.problem import Problem, build_problem
from scheduler.types import PlanRequest

Queues = tuple[tuple[int, ...], ...]


def _kv_bound(
    trajectories: int, workers: int, seed: int, median: float
) -> tuple[Problem, Queues, tuple[float, ...]]:
    """A long-tailed batch on few workers, so queues do not fit the KV cache at once; lpt-placed."""
    request = PlanRequest(
        trajectories=heavy_tailed_batch(trajectories, seed, median_output=median),
        inventory=mixed_inventory(workers),
    )
    problem = build_problem(request)
    queues, finishes = order_queues(problem, lpt_assignment(problem), reserve=False)
    return problem, queues, finishes


def test_refining_the_last_worker_shortens_a_kv_bound_makespan() -> None:
    problem, queues, finishes = _kv_bound(256, 2, seed=2, median=12_000.0)
    refined, refined_finishes = refine_critical(problem, queues, finishes, False, time.perf_counter() + 60)
    assert max(refined_finishes) < max(finishes)
    for w, queue in enumerate(refined):  # the reported finish is the worker model's, for the new order
        prompts, steps = [problem.prompts[i] for i in queue], [problem.steps[i] for i in queue]
        assert refined_finishes[w] == worker_finish(problem.costs[w], prompts, steps)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("median", [8_000.0, 12_000.0])
def test_refining_never_slows_a_worker_nor_moves_an_item(seed: int, median: float) -> None:
    problem, queues, finishes = _kv_bound(256, 2, seed, median)
    refined, refined_finishes = refine_critical(problem, queues, finishes, False, time.perf_counter() + 60)
    assert all(new <= old for new, old in zip(refined_finishes, finishes, strict=True))
    assert [sorted(q) for q in refined] == [sorted(q) for q in queues]


def test_a_spent_budget_leaves_the_plan_as_it_was() -> None:
    problem, queues, finishes = _kv_bound(256, 2, seed=2, median=12_000.0)
    assert refine_critical(problem, queues, finishes, False, time.perf_counter() - 1.0) == (queues, finishes)

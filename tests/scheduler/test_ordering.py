"""Order inside a worker: the wider search on the worker that finishes last (``refine_critical``)."""

from __future__ import annotations

import random
import time
from dataclasses import replace

import pytest

from scheduler.at_once import all_at_once_finish
from scheduler.benchgen import heavy_tailed_batch, mixed_inventory
from scheduler.devices import device_profile, model_preset
from scheduler.finish import worker_finish
from scheduler.planner import plan
from scheduler.policies import ordering
from scheduler.policies.lpt_assign import lpt_assignment
from scheduler.policies.ordering import (
    CANDIDATES,
    UNSEARCHED,
    best_order,
    longest_first,
    order_queues,
    refine_critical,
)
from scheduler.policies.problem import Problem, build_problem
from scheduler.types import Inventory, PlanRequest, Trajectory, Worker

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


def _with_admission(trajectories: int, workers: int, seed: int, median: float) -> Problem:
    request = PlanRequest(
        trajectories=heavy_tailed_batch(trajectories, seed, median_output=median),
        inventory=mixed_inventory(workers),
        kv_admission=True,
    )
    return build_problem(request)


# (512, 2, 8k): a worker that does not run at once decides the makespan and longest-first is not
# its best order (seeds 0 and 2); (1024, 4, 3k): workers below the floor keep longest-first.
@pytest.mark.parametrize(("trajectories", "workers", "median"), [(1024, 4, 3_000.0), (512, 2, 8_000.0)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_skipping_orders_of_workers_that_finish_early_never_changes_the_makespan(
    trajectories: int, workers: int, median: float, seed: int
) -> None:
    problem = _with_admission(trajectories, workers, seed, median)
    queues, finishes = order_queues(problem, lpt_assignment(problem), reserve=True)
    searched = [best_order(problem, list(q), problem.costs[w], True)[1] for w, q in enumerate(queues)]
    assert max(finishes) == pytest.approx(max(searched), rel=1e-12)
    for w, queue in enumerate(queues):  # every reported finish is the worker model's for its order
        prompts, steps = [problem.prompts[i] for i in queue], [problem.steps[i] for i in queue]
        assert finishes[w] == worker_finish(problem.costs[w], prompts, steps, True)


def test_a_worker_that_finishes_before_a_worker_running_at_once_keeps_longest_first() -> None:
    problem = _with_admission(1024, 4, seed=0, median=3_000.0)
    queues, finishes = order_queues(problem, lpt_assignment(problem), reserve=True)
    searched = [best_order(problem, list(q), problem.costs[w], True)[1] for w, q in enumerate(queues)]
    kept = [w for w in range(len(queues)) if finishes[w] > searched[w]]
    assert kept  # this batch has such workers: the search was skipped there
    for w in kept:
        assert list(queues[w]) == longest_first(problem, list(queues[w]), problem.costs[w])
        assert finishes[w] < max(finishes)


@pytest.mark.parametrize("reserve", [False, True])
def test_with_no_time_to_search_a_queue_is_played_once_in_the_order_that_serves_best(
    reserve: bool,
) -> None:
    request = PlanRequest(
        trajectories=heavy_tailed_batch(256, 2, median_output=12_000.0), inventory=mixed_inventory(2)
    )
    problem = build_problem(request)
    assignment = lpt_assignment(problem)
    queues, finishes = order_queues(problem, assignment, reserve, search_until=time.perf_counter() - 1.0)
    _, searched_finishes = order_queues(problem, assignment, reserve)
    unsearched = 0
    for w, units in enumerate(assignment):
        items = [i for u in units for i in problem.units[u].members]
        cost = problem.costs[w]
        at_once = all_at_once_finish(cost, *problem.lengths(longest_first(problem, items, cost)), reserve)
        rule = longest_first if at_once is not None else UNSEARCHED[reserve]  # at once: any order
        assert list(queues[w]) == rule(problem, items, cost)
        assert finishes[w] == worker_finish(cost, *problem.lengths(list(queues[w])), reserve)
        unsearched += at_once is None
    assert unsearched > 0
    assert max(searched_finishes) <= max(finishes)  # the search plays that order among others


def test_where_the_cache_holds_few_long_items_the_last_worker_mixes_lengths_and_beats_the_equal_split() -> (
    None
):
    """One H100 with 4 slots and 50k tokens of cache, 100 items of up to 30k tokens: every sorted
    order runs similar lengths together and overflows the cache over and over (each eviction loses
    the sequence's progress); the golden-ratio spread of the ranking overflows it least."""
    rng = random.Random(0)
    worker = Worker("w0", device_profile("H100"), max_num_seqs=4, kv_capacity_tokens=50_000)
    batch = tuple(
        Trajectory(f"p{i}", 0, rng.randint(1, 2000), 37_999, float(rng.randint(1, 30_000)))
        for i in range(100)
    )
    request = PlanRequest(batch, Inventory((worker,), model_preset("7b")), time_budget_s=1.0)
    problem = build_problem(request)
    items, cost = list(range(100)), problem.costs[0]
    sorted_best = min(
        worker_finish(cost, *problem.lengths(o(problem, items, cost))) for o in CANDIDATES[False]
    )
    lpt = plan(request, "lpt").predicted_makespan_s
    assert lpt < plan(request, "round_robin").predicted_makespan_s
    assert lpt < 0.7 * sorted_best


def _every_candidate(problem: Problem, items: list[int], w: int, reserve: bool) -> tuple[list[int], float]:
    """The candidates played in full in their listed order, the first of the fastest kept: what
    ``best_order`` chooses, whatever it plays first or stops early."""
    cost = problem.costs[w]
    played = [
        (problem.played(cost, order, reserve), order)
        for order in (c(problem, items, cost) for c in CANDIDATES[reserve])
    ]
    finish = min(f for f, _ in played)
    return next(order for f, order in played if f == finish), finish


@pytest.mark.parametrize("reserve", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_the_best_order_is_the_first_fastest_candidate_and_a_limit_changes_it_only_past_the_limit(
    reserve: bool, seed: int
) -> None:
    # best_order plays longest-first last and stops each play where it cannot win (plateau's
    # limit, the best so far); the choice is still the fastest candidate, the earlier of equals,
    # and below the limit the same order and finish; at or past it, a value of at least the limit
    problem = _with_admission(512, 2, seed, 8_000.0) if reserve else _kv_bound(512, 2, seed, 8_000.0)[0]
    queues, _ = order_queues(problem, lpt_assignment(problem), reserve)
    for w, queue in enumerate(queues):
        items, cost = list(queue), problem.costs[w]
        if all_at_once_finish(cost, *problem.lengths(items), reserve) is not None:
            continue
        order, finish = _every_candidate(build_problem_like(problem), items, w, reserve)
        assert best_order(build_problem_like(problem), items, cost, reserve) == (order, finish)
        for share in (0.9, 1.0, 1.01):
            limited = best_order(build_problem_like(problem), items, cost, reserve, share * finish)
            if finish < share * finish:
                assert limited == (order, finish)
            else:
                assert limited[1] >= share * finish


def build_problem_like(problem: Problem) -> Problem:
    """``problem`` with empty play memos: each call plays afresh, as a new plan would."""
    return replace(problem)


def test_among_equal_candidates_the_first_listed_wins_though_played_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # equal items: every order finishes alike, and the first candidate listed (played last, stopped
    # just past the best) is kept, as ``_played`` keeps it; here it is the only one that reverses
    def reversed_order(problem: Problem, items: list[int], cost: object) -> list[int]:
        return items[::-1]

    def as_given(problem: Problem, items: list[int], cost: object) -> list[int]:
        return list(items)

    monkeypatch.setitem(ordering.CANDIDATES, False, (reversed_order, as_given, as_given, as_given))
    worker = Worker("w", device_profile("Ascend910B"), max_num_seqs=8, kv_capacity_tokens=20_000)
    request = PlanRequest(
        tuple(Trajectory(f"t{i}", 0, 300, 4_000, 4_000.0) for i in range(40)),
        Inventory((worker,), model_preset("7b")),
    )
    problem = build_problem(request)
    items, cost = list(range(40)), problem.costs[0]
    assert all_at_once_finish(cost, *problem.lengths(items), False) is None  # the candidates are played
    assert best_order(problem, items, cost, False)[0] == items[::-1]

"""The robust choice: a plan is judged by its makespan over draws of the lengths the quantiles allow."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.devices import device_profile, model_preset
from scheduler.finish import queue_finishes
from scheduler.lognormal import sigma_through
from scheduler.policies.problem import Problem, build_problem
from scheduler.policies.robust import (
    SAMPLES,
    Spread,
    draw_matrix,
    draw_steps,
    least_expected,
    makespans,
    spreads,
)
from scheduler.types import Inventory, PlanRequest, Trajectory, Worker
from tests.scheduler.long_and_short import CROWDED, EVEN, long_and_short, problem_of


def test_without_a_p90_for_every_trajectory_there_is_nothing_to_draw_from() -> None:
    batch = long_and_short(2.0)
    assert spreads(batch) is not None
    assert spreads((*batch[:-1], Trajectory("x", 0, 10, 100, 50.0, {0.5: 50.0}))) is None
    assert spreads((*batch[:-1], Trajectory("x", 0, 10, 100, 50.0))) is None


def test_a_trajectory_without_a_p90_past_the_first_block_read_still_leaves_nothing_to_draw_from() -> None:
    batch = long_and_short(2.0) * 3  # 1,200: blocks of GIVE_UP_EVERY
    assert spreads((*batch[:1_000], Trajectory("x", 0, 10, 100, 50.0, {0.5: 50.0}), *batch[1_000:])) is None


def test_the_spreads_are_each_trajectory_s_median_cap_and_scalar_sigma_to_the_bit() -> None:
    rng = np.random.default_rng(5)
    medians = [*rng.uniform(1.0, 3_000.0, 1_100).tolist(), 5e-324, 1e300]
    highs = [*(np.array(medians[:-2]) * rng.uniform(0.5, 4.0, 1_100)).tolist(), 1e300, 1.7e308]
    batch = [
        Trajectory(f"t{k}", 0, 10, 512 + k, min(p50, 512.0), {0.5: p50, 0.9: p90})
        for k, (p50, p90) in enumerate(zip(medians, highs, strict=True))
    ]
    spread = spreads(batch)
    assert spread is not None
    expected = [sigma_through(p50, p90) for p50, p90 in zip(medians, highs, strict=True)]
    assert np.array_equal(spread[0], medians)
    assert np.array_equal(spread[1].view(np.uint64), np.array(expected).view(np.uint64))
    assert np.array_equal(spread[2], [t.max_new_tokens for t in batch])


def test_int_quantiles_get_the_scalar_sigma_of_their_exact_ratio() -> None:
    p50, p90 = 279105623889470349339705, 3958810827278571503967862  # past 2**53: as floats, another ratio
    assert sigma_through(p50, p90) != sigma_through(float(p50), float(p90))
    batch = (*long_and_short(2.0)[:3], Trajectory("x", 0, 10, 100, 50.0, {0.5: p50, 0.9: p90}))
    spread = spreads(batch)
    assert spread is not None
    assert spread[1][-1] == sigma_through(p50, p90)


def test_with_no_spread_every_draw_is_the_prediction_and_the_shorter_plan_wins() -> None:
    batch = long_and_short(1.0)
    problem, spread = problem_of(batch), spreads(batch)
    assert spread is not None
    costs, prompts, steps = problem.costs, problem.prompts, problem.steps
    finishes = [max(queue_finishes(costs, prompts, steps, q, True)) for q in (CROWDED, EVEN)]
    assert finishes[0] < finishes[1]  # on the predictions, crowding the short ones is the better plan
    assert least_expected(problem, (CROWDED, EVEN), spread, True, 0, time.perf_counter() + 60) == 0


def test_a_crowded_worker_is_the_worse_bet_when_any_short_trajectory_may_run_long() -> None:
    batch = long_and_short(3.0)
    problem, spread = problem_of(batch), spreads(batch)
    assert spread is not None
    deadline = time.perf_counter() + 60
    assert least_expected(problem, (CROWDED, EVEN), spread, True, 0, deadline) == 1
    assert least_expected(problem, (EVEN, CROWDED), spread, True, 0, deadline) == 0  # not the order


def test_no_choice_is_made_when_the_draws_would_not_fit_the_deadline() -> None:
    batch = long_and_short(3.0)
    problem, spread = problem_of(batch), spreads(batch)
    assert spread is not None
    assert least_expected(problem, (CROWDED, EVEN), spread, True, 0, time.perf_counter()) is None


def test_the_draws_as_one_array_are_the_successive_draws_of_the_same_generator() -> None:
    spread = spreads(long_and_short(3.0))
    assert spread is not None
    one_by_one = np.random.default_rng(7)
    expected = [draw_steps(spread, one_by_one) for _ in range(5)]
    assert draw_matrix(spread, np.random.default_rng(7), 5).tolist() == expected


def _per_draw_choice(
    problem: Problem, candidates: Sequence[Sequence[Sequence[int]]], spread: Spread, reserve: bool, seed: int
) -> tuple[int, list[float]]:
    """``least_expected`` the way it played first, one draw at a time: each draw's makespan of every
    candidate (``queue_finishes``) added to its total in draw order; the least total, first of equals."""
    rng = np.random.default_rng(seed)
    totals = [0.0] * len(candidates)
    for _ in range(SAMPLES):
        steps = draw_steps(spread, rng)
        for c, queues in enumerate(candidates):
            totals[c] += max(queue_finishes(problem.costs, problem.prompts, steps, queues, reserve))
    return min(range(len(candidates)), key=lambda c: (totals[c], c)), totals


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 3),
    st.integers(0, 3),
    st.sampled_from([4, 16, 256]),
    st.integers(1, 90),
    st.floats(1.0, 3.0),
    st.booleans(),
    st.integers(0, 2**32 - 1),
)
def test_draws_played_a_block_at_a_time_choose_as_one_draw_at_a_time(
    h100s: int, ascends: int, slots: int, size: int, spread_ratio: float, reserve: bool, seed: int
) -> None:
    """Random batches dealt at random to three candidates (one crowded onto a worker, so that its
    queue runs in waves, past its slots or its cache, and the event loop plays it; some workers
    left empty): the same choice as the per-draw loop, and each candidate's mean the same float."""
    rng = np.random.default_rng(seed)
    batch = []
    for i in range(size):
        p50 = float(rng.uniform(50.0, 6_000.0))
        prompt, cap = int(rng.integers(10, 2_000)), int(rng.choice([1_024, 8_192, 32_768]))
        batch.append(Trajectory(f"q{i // 4}", i % 4, prompt, cap, p50, {0.5: p50, 0.9: p50 * spread_ratio}))
    h100, ascend = device_profile("H100"), device_profile("Ascend910B")
    workers = [Worker(f"h100-{j}", h100, max_num_seqs=slots) for j in range(h100s)]
    workers += [Worker(f"a910b-{j}", ascend, max_num_seqs=slots) for j in range(ascends)]
    request = PlanRequest(tuple(batch), Inventory(tuple(workers), model_preset("7b")), kv_admission=reserve)
    problem, spread = build_problem(request), spreads(request.trajectories)
    assert spread is not None
    dealt = [rng.integers(0, len(workers), size) for _ in range(2)]
    candidates = [[np.flatnonzero(owner == w).tolist() for w in range(len(workers))] for owner in dealt]
    candidates.append([list(range(size)) if w == 0 else [] for w in range(len(workers))])  # one crowded
    choice, totals = _per_draw_choice(problem, candidates, spread, reserve, seed)
    assert least_expected(problem, candidates, spread, reserve, seed, math.inf) == choice
    draws = draw_matrix(spread, np.random.default_rng(seed), SAMPLES)
    for queues, total in zip(candidates, totals, strict=True):
        summed = 0.0
        for makespan in makespans(problem, queues, draws, reserve).tolist():  # in draw order
            summed += makespan
        assert summed == total

"""Symmetric decomposition: a large batch planned on one K-th of itself and copied K times."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import scheduler.policies.cpsat as cpsat_module
from scheduler.benchgen import bench_request, with_speed_spread
from scheduler.lowerbound import lower_bound
from scheduler.planner import plan
from scheduler.policies import copybudget, replicate
from scheduler.policies.lpt import LptPolicy
from scheduler.policies.problem import Problem, build_problem
from scheduler.types import PlanRequest

COPY_SLACK = 0.005  # copies' lengths differ from sub-batch 0's by a rank: with equal speeds they end
# 0.1-0.3% past the sub-plan (1,024 x 32, seeds 0-3)


@pytest.fixture
def small_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Decompose test-sized batches: 256 units and 8 workers per sub-pool are enough here."""
    monkeypatch.setattr(replicate, "MIN_UNITS", 256)
    monkeypatch.setattr(replicate, "SUB_WORKERS", 8)


def _request(trajectories: int = 1_024, workers: int = 32, budget: float = 2.0) -> PlanRequest:
    return dataclasses.replace(bench_request(trajectories, workers, seed=3), time_budget_s=budget)


def _split(request: PlanRequest) -> tuple[Problem, replicate.Split]:
    problem = build_problem(request)
    part = replicate.split(problem, request)
    assert part is not None
    return problem, part


@pytest.mark.usefixtures("small_thresholds")
def test_a_batch_splits_into_sub_pools_with_the_same_mix_and_sub_batches_by_length_rank() -> None:
    request = _request()
    problem, part = _split(request)
    assert part.copies == 4  # 32 workers, sub-pools of 8: 4 H100 + 4 Ascend each
    assert sorted(w for pool in part.pools for w in pool) == list(range(32))
    for pool in part.pools:
        kinds = [request.inventory.workers[w].device.name for w in pool]
        assert kinds.count("H100") == kinds.count("Ascend910B") == 4
    assert part.request.trajectories == tuple(request.trajectories[u] for u in part.ranked[::4])
    for full, tight in zip((problem.costs[w] for w in part.pools[0]), part.problem.costs, strict=True):
        assert tight.kv_capacity_tokens == int(replicate.HEADROOM * full.kv_capacity_tokens)


@pytest.mark.usefixtures("small_thresholds")
def test_small_pinned_grouped_or_uneven_batches_are_not_split() -> None:
    request = _request()
    pinned = request.trajectories[0]
    cases = [
        _request(trajectories=128),  # below MIN_UNITS
        _request(workers=12),  # 6 + 6 workers: no sub-pool of 8 with every kind split evenly
        dataclasses.replace(request, prefix_affinity=True),
        dataclasses.replace(
            request,
            trajectories=(dataclasses.replace(pinned, pinned_worker="h100-0"), *request.trajectories[1:]),
        ),
    ]
    for case in cases:
        assert replicate.split(build_problem(case), case) is None


@pytest.mark.usefixtures("small_thresholds")
def test_copies_hold_every_trajectory_once_follow_their_twins_order_and_balance_prompts() -> None:
    request = _request()
    problem, part = _split(request)
    twins = LptPolicy().plan(part.request, part.problem).queues
    queues = replicate.spread_out(part, twins, problem.prompts, len(problem.costs))
    assert sorted(u for queue in queues for u in queue) == list(range(len(request.trajectories)))
    rank = {u: r for r, u in enumerate(part.ranked)}
    largest = max(problem.prompts)
    for position, twin in enumerate(twins):
        mates = [pool[position] for pool in part.pools]
        for w in mates:  # in its twin's order: each unit's tuple (rank // K) as the twin runs them
            tuples = [rank[u] // part.copies for u in queues[w]]
            assert tuples == [i for i in twin if i in set(tuples)]
        totals = [sum(problem.prompts[u] for u in queues[w]) for w in mates]
        assert max(totals) - min(totals) <= largest


@pytest.mark.usefixtures("small_thresholds")
def test_cpsat_plans_a_batch_too_big_for_a_full_round_by_copies_and_never_worse_than_lpt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With time clearly left (2 s), the copies of a sub-plan twice as large (K = 2) come first and
    the usual sub-plan (K = 4) after them (``cpsat._copied``); the better plan beats lpt's."""
    monkeypatch.setattr(copybudget, "FULL_ROUND", 1e9)  # no full round ever fits: copies it is
    copied: list[int] = []  # K of each copying cpsat tries
    original = cpsat_module.CpSatPolicy._copy

    def spy(self: Any, problem: Any, part: replicate.Split, *args: Any) -> Any:
        copied.append(part.copies)
        return original(self, problem, part, *args)

    monkeypatch.setattr(cpsat_module.CpSatPolicy, "_copy", spy)
    request = _request()
    cpsat, lpt = plan(request, "cpsat"), plan(request, "lpt")
    assert copied == [2, 4]
    assert cpsat.status in {"OPTIMAL", "FEASIBLE"}
    assert cpsat.predicted_makespan_s < lpt.predicted_makespan_s
    assert cpsat.predicted_makespan_s >= lower_bound(request.trajectories, request.inventory).value_s
    keys = sorted(key for wp in cpsat.workers for key in wp.items)
    assert keys == sorted(t.key for t in request.trajectories)


@pytest.mark.usefixtures("small_thresholds")
def test_excluded_workers_stay_out_of_every_sub_pool_and_get_no_copy() -> None:
    request = dataclasses.replace(_request(), excluded_workers=frozenset({"h100-0", "h100-1"}))
    problem, part = _split(request)
    assert part.copies == 2  # 14 H100 + 16 Ascend: two sub-pools of 7 + 8
    assert {0, 1}.isdisjoint(w for pool in part.pools for w in pool)
    twins = LptPolicy().plan(part.request, part.problem).queues
    queues = replicate.spread_out(part, twins, problem.prompts, len(problem.costs))
    assert queues[0] == queues[1] == ()
    assert sorted(u for queue in queues for u in queue) == list(range(len(request.trajectories)))


@pytest.mark.usefixtures("small_thresholds")
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_with_learned_speeds_no_copy_ends_past_the_sub_plan_it_copies(seed: int) -> None:
    """Each position's mates differ in speed when every worker has its own learned scale; the
    sub-plan is planned at the slowest mate's, so a copy (its twin's queue on lengths of no higher
    rank) ends no later than its twin was planned to. Planned on sub-pool 0's own (fastest) mates,
    copies ran 5-9% past it here."""
    request = with_speed_spread(_request(), 0.1, seed)
    problem, part = _split(request)
    for position, cost in enumerate(part.problem.costs):
        assert cost.time_scale == max(problem.costs[pool[position]].time_scale for pool in part.pools)
    sub = LptPolicy().plan(part.request, part.problem)
    planned = sub.finish_s or tuple(part.problem.finishes(sub.queues, False))
    queues = replicate.spread_out(part, sub.queues, problem.prompts, len(problem.costs))
    finishes = problem.finishes(queues, False)
    assert max(finishes) <= max(planned) * (1 + COPY_SLACK)


@pytest.mark.usefixtures("small_thresholds")
def test_with_equal_speeds_sub_pool_zero_keeps_its_own_workers() -> None:
    request = _request()
    _, part = _split(request)
    assert part.request.inventory.workers == tuple(request.inventory.workers[w] for w in part.pools[0])


def _spread_out_by_tuple(
    part: replicate.Split, queues: tuple[tuple[int, ...], ...], prompts: tuple[int, ...], workers: int
) -> tuple[tuple[int, ...], ...]:
    """``spread_out`` as first written, tuple by tuple and mate by mate: the reference it must equal."""
    k, ranked = part.copies, part.ranked
    out: list[tuple[int, ...]] = [() for _ in range(workers)]
    for position, queue in enumerate(queues):
        mates = [pool[position] for pool in part.pools]
        held = dict.fromkeys(mates, 0)
        chosen: dict[tuple[int, int], int] = {}
        for i in sorted(queue):
            members = sorted(
                (ranked[r] for r in range(i * k, min((i + 1) * k, len(ranked)))), key=lambda u: -prompts[u]
            )
            for u, w in zip(members, sorted(mates, key=lambda m: held[m]), strict=False):
                chosen[i, w] = u
                held[w] += prompts[u]
        for w in mates:
            out[w] = tuple(chosen[i, w] for i in queue if (i, w) in chosen)
    return tuple(out)


@pytest.mark.usefixtures("small_thresholds")
@pytest.mark.parametrize(("trajectories", "spread"), [(1_024, 0.0), (1_024, 0.1), (1_023, 0.0)])
def test_copies_are_dealt_as_the_reference_deals_them(trajectories: int, spread: float) -> None:
    """The same queues as the reference, ties in prompts and a short last tuple (1,023 = 4 x 255 + 3)
    included: the copies are computed once per position, not per mate, and nothing else changes."""
    request = with_speed_spread(_request(trajectories=trajectories), spread, 3)
    problem, part = _split(request)
    twins = LptPolicy().plan(part.request, part.problem).queues
    expected = _spread_out_by_tuple(part, twins, problem.prompts, len(problem.costs))
    assert replicate.spread_out(part, twins, problem.prompts, len(problem.costs)) == expected

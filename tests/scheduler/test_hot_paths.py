"""Shortcuts on the planner's hot paths give exactly what the plain computations they replace give.

Each replaces a Python loop with C-level work (gathers, sums) or skips look-ups that cannot change
the answer; plans must not move by a bit (the headline replay and ``bench solver``'s plans are
compared on them), so every check here is equality, floats included.
"""

from __future__ import annotations

import dataclasses

import pytest

from scheduler.benchgen import bench_request, heavy_tailed_batch, mixed_inventory
from scheduler.policies.kvpeak import KvPeaks
from scheduler.policies.load import Load, load_of
from scheduler.policies.problem import Problem, Unit, build_problem
from scheduler.policies.round_robin import RoundRobinPolicy
from scheduler.types import PlanRequest, trajectory_keys


def _one_by_one(problem: Problem, items: list[int]) -> tuple[int, int, float, int]:
    """What the length-blind bar's floor summed before: each item's KV-token-steps from its lengths,
    added in queue order."""
    longest = tokens = prompt = 0
    kv = 0.0
    for i in items:
        length, p = problem.steps[i], problem.prompts[i]
        longest = max(longest, length)
        tokens += length
        prompt += p
        kv += p * length + length * (length - 1) / 2
    return longest, tokens, kv, prompt


def _pinned(affinity: bool) -> PlanRequest:
    pinned = {"p3": "h100-1", "p7": "a910b-40"}
    batch = heavy_tailed_batch(2_048, seed=5)
    batch = tuple(dataclasses.replace(t, pinned_worker=pinned.get(t.prompt_id)) for t in batch)
    return PlanRequest(batch, mixed_inventory(64), prefix_affinity=affinity)


CASES = {
    "4096x32": bench_request(4_096, 32, seed=1),
    "pins": _pinned(affinity=False),
    "pins-affinity": _pinned(affinity=True),
}


@pytest.mark.parametrize("request_", CASES.values(), ids=CASES.keys())
def test_item_totals_are_the_one_by_one_sums_to_the_last_bit(request_: PlanRequest) -> None:
    problem = build_problem(request_)
    bare = Problem(problem.costs, problem.prompts, problem.steps, problem.units, problem.active)
    queues = RoundRobinPolicy().plan(request_, problem).queues
    for items in [*queues, (), (7,), tuple(reversed(range(0, len(problem.steps), 3)))]:
        expected = _one_by_one(problem, list(items))
        assert problem.item_totals(items) == expected  # with the column
        assert bare.item_totals(items) == expected  # a problem built elsewhere derives it
    assert len(problem.kv_steps) == len(problem.steps)


@pytest.mark.parametrize("request_", CASES.values(), ids=CASES.keys())
def test_load_of_units_is_what_adding_them_one_at_a_time_totals(request_: PlanRequest) -> None:
    problem = build_problem(request_)
    everything = list(range(len(problem.units)))
    for units in (everything, everything[::-5], everything[:1], []):
        added = Load()
        for u in units:
            added.add(problem.units[u])
        assert load_of(problem, units) == added


@pytest.mark.parametrize("request_", CASES.values(), ids=CASES.keys())
def test_round_robin_deals_as_the_per_sample_look_ups_do(request_: PlanRequest) -> None:
    """Unrestricted problems skip the look-ups of each sample's allowed workers; the plan is the one
    those look-ups give (a problem marked restricted always takes them)."""
    problem = build_problem(request_)
    looked_up = dataclasses.replace(problem, unrestricted=False)
    assert RoundRobinPolicy().plan(request_, problem) == RoundRobinPolicy().plan(request_, looked_up)


def test_every_case_above_but_the_pinned_ones_takes_the_shortcut() -> None:
    assert [build_problem(r).unrestricted for r in CASES.values()] == [True, False, False]


def test_trajectory_keys_are_each_trajectorys_key() -> None:
    batch = heavy_tailed_batch(1_000, seed=2)
    assert trajectory_keys(batch) == tuple(t.key for t in batch)


@pytest.mark.parametrize("request_", CASES.values(), ids=CASES.keys())
def test_a_kv_peak_added_unit_by_unit_is_the_peak_after_each(request_: PlanRequest) -> None:
    """``KvPeaks.add`` inlines ``peak_after`` for single units; a queue's peak is still the
    largest ``peak_after`` seen on the way."""
    problem = build_problem(request_)
    peaks = KvPeaks(problem)
    for k, u in enumerate(problem.ranked):
        w = k % len(problem.costs)
        expected = peaks.peak_after(w, problem.units[u])
        peaks.add(w, problem.units[u])
        assert peaks.peak[w] == expected


@pytest.mark.parametrize("request_", CASES.values(), ids=CASES.keys())
def test_single_units_built_in_bulk_are_the_units_built_one_by_one(request_: PlanRequest) -> None:
    """Without affinity a unit is its trajectory, built from the zipped columns in one C-level pass:
    the same fields and the same type as a constructor call each, with the workers the rule of
    ``Unit.allowed`` gives (active, the pin if any, a cache that holds it; else every active one)."""
    request_ = dataclasses.replace(request_, prefix_affinity=False)
    problem = build_problem(request_)
    workers = request_.inventory.workers
    expected = []
    for i, t in enumerate(request_.trajectories):
        length, need = problem.steps[i], t.prompt_tokens + t.max_new_tokens
        pins = [w for w, worker in enumerate(workers) if worker.worker_id == t.pinned_worker]
        fit = tuple(w for w in (pins or problem.active) if problem.costs[w].kv_capacity_tokens >= need)
        kv = t.prompt_tokens * length + length * (length - 1) / 2
        expected.append(Unit((i,), length, length, kv, t.prompt_tokens, fit or problem.active))
    assert problem.units == tuple(expected)
    assert {type(u) for u in problem.units} == {Unit}

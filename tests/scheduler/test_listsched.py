"""Tier-aware list scheduling: the ordered scan is a shortcut, never a different choice."""

from __future__ import annotations

import dataclasses
import functools

import pytest

from scheduler.benchgen import bench_request, heavy_tailed_batch, mixed_inventory
from scheduler.policies import cpsat, listsched
from scheduler.policies.levels import solve_levels
from scheduler.policies.lpt import lpt_assignment
from scheduler.policies.problem import Problem, build_problem
from scheduler.types import PlanRequest


def _tiered(problem: Problem, scaled: bool) -> list[list[int]]:
    kinds = listsched.worker_kinds(problem.costs, problem.active)
    levels = solve_levels(problem.units, [(problem.costs[m[0]], len(m)) for m in kinds], 2_000.0, 5.0, 0)
    assert levels is not None
    tiers = cpsat._tiers(levels, kinds, len(problem.costs))
    scale = [1.0 + 0.01 * (w % 7) for w in range(len(problem.costs))] if scaled else None
    return lpt_assignment(problem, tiers, functools.partial(cpsat._band, edges=levels.edges), scale)


def _pinned_groups(affinity: bool) -> PlanRequest:
    pinned = {"p3": "h100-1", "p7": "a910b-40"}
    batch = heavy_tailed_batch(2_048, seed=5)
    batch = tuple(dataclasses.replace(t, pinned_worker=pinned.get(t.prompt_id)) for t in batch)
    return PlanRequest(batch, mixed_inventory(64), prefix_affinity=affinity,
                       excluded_workers=frozenset({"h100-0"}))  # fmt: skip


CASES = {
    "4096x32-s0": bench_request(4_096, 32, seed=0),
    "4096x32-s1": bench_request(4_096, 32, seed=1),
    "2048x64-s2": bench_request(2_048, 64, seed=2),
    "pins": _pinned_groups(affinity=False),
    "pins-affinity": _pinned_groups(affinity=True),
}


@pytest.mark.parametrize("request_", CASES.values(), ids=CASES.keys())
@pytest.mark.parametrize("scaled", [False, True], ids=["plain", "scaled"])
def test_the_ordered_scan_places_every_unit_where_scanning_every_heap_would(
    request_: PlanRequest, scaled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    problem = build_problem(request_)
    ordered = _tiered(problem, scaled)
    monkeypatch.setattr(listsched, "ORDERED_SCAN", False)
    assert ordered == _tiered(problem, scaled)

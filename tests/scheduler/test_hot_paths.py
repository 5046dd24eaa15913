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
from scheduler.policies.problem import build_problem
from scheduler.types import PlanRequest


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

"""A group's members of different lengths in a queue's KV peak (``KvPeaks.peak_after``): members are
counted longest first, so the cache holds all of them only up to the shortest one's length, and the
longest alone past it. Found by mutation testing of round 65's code (docs/experiments.md, "Mutation
testing of round 65's new code"): taken shortest first, the peak counted every member at the longest
one's length, and a group whose true peak fits a cache did not.
"""

from __future__ import annotations

from scheduler.benchgen import mixed_inventory
from scheduler.policies.kvpeak import KvPeaks
from scheduler.policies.problem import build_problem
from scheduler.types import PlanRequest, Trajectory

CAP = 16_384


def test_a_group_of_a_long_and_a_short_sample_peaks_at_the_long_one_alone() -> None:
    samples = (
        Trajectory("g", 0, 100, CAP, predicted_tokens=8_000.0),
        Trajectory("g", 1, 100, CAP, predicted_tokens=500.0),
    )
    problem = build_problem(PlanRequest(samples, mixed_inventory(2), kv_admission=True, prefix_affinity=True))
    (unit,) = problem.units
    long, short = sorted(unit.members, key=lambda m: -problem.steps[m])
    prompts = problem.prompts[long] + problem.prompts[short]
    alone, together = problem.prompts[long] + problem.steps[long], prompts + 2 * problem.steps[short]
    assert alone > together  # the short one is done long before the long one's peak
    peaks = KvPeaks(problem)
    assert peaks.peak_after(0, unit) == alone
    peaks.limit[0] = float(alone)  # a cache the long sample fills exactly
    assert peaks.fits(0, unit)
    peaks.add(0, unit)
    assert peaks.peak[0] == alone

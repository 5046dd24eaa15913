"""What list scheduling prices a worker at: the load model's estimate of its totals, scaled, to the bit.

``Estimates.after`` and ``least_after`` (and ``listrun``'s copy of them) write ``load.estimate`` out
for speed; placements compare these floats for ties, so the copies must agree with the model exactly,
not approximately."""

from __future__ import annotations

from scheduler.benchgen import bench_request, heavy_tailed_batch, mixed_inventory
from scheduler.policies.estimates import Estimates
from scheduler.policies.kvpeak import KvPeaks
from scheduler.policies.load import Load, time_with
from scheduler.policies.problem import Problem, build_problem
from scheduler.types import PlanRequest

SLOTS = 16  # small, so that workers pass their slots and price at their waves scale


def _problem() -> Problem:
    return build_problem(
        PlanRequest(heavy_tailed_batch(1_024, seed=3), mixed_inventory(8, max_num_seqs=SLOTS))
    )


def _estimates(problem: Problem) -> tuple[Estimates, KvPeaks]:
    """Distinct scales per worker, and every third worker slower past its slots."""
    kv = KvPeaks(problem)
    scale = [1.0 + 0.01 * (w % 7) for w in range(len(problem.costs))]
    waves = [s * (1.1 if w % 3 == 0 else 1.0) for w, s in enumerate(scale)]
    return Estimates(problem, scale, waves, kv), kv


def _load(estimates: Estimates, w: int) -> Load:
    return Load(
        estimates.load_steps[w], estimates.load_tokens[w], estimates.load_kv[w], estimates.load_prompt[w]
    )


def test_a_workers_estimate_now_and_after_a_unit_are_the_load_models_times_its_scale() -> None:
    problem = _problem()
    estimates, kv = _estimates(problem)
    waves, workers = estimates.waves, len(problem.costs)
    assert waves is not None
    past_slots = 0
    for u, unit in enumerate(problem.units):
        for w in range(workers):
            sequences = kv.count[w] + len(unit.members)
            scale = estimates.scale_at(w, sequences)
            assert scale == (waves[w] if sequences > SLOTS else estimates.scale[w])
            assert estimates.after(w, unit) == scale * time_with(problem.costs[w], _load(estimates, w), unit)
            past_slots += sequences > SLOTS
        w = u % workers
        kv.add(w, unit)
        estimates.add(w, unit)
        held = estimates.scale_at(w, kv.count[w]) * time_with(problem.costs[w], _load(estimates, w))
        assert estimates.now(w) == held
    assert past_slots > 0


def test_the_least_estimate_after_a_unit_wins_ties_to_the_lower_worker() -> None:
    """``least_after`` stops at the first top keyed above the best so far; with every worker's
    current estimate as its key that never loses the least, even where two workers are equal."""
    problem = build_problem(bench_request(1_024, 16, seed=0))
    estimates, kv = _estimates(problem)
    workers = len(problem.costs)
    for u, unit in enumerate(problem.units):
        tops = [(estimates.now(w), w) for w in range(workers)]
        assert (
            estimates.least_after(tops, unit)
            == min((estimates.after(w, unit), w) for w in range(workers))[::-1]
        )
        w = (u * 5) % workers
        kv.add(w, unit)
        estimates.add(w, unit)

"""LPT's plain loop (``lpt_assign._plain_lpt``, pools of more than 8 workers, none restricted) is a
specialisation of the general list placement, not a second rule: where a kind's members share one
scale, both place every unit on the same worker, ties included. A mutant of the plain loop's estimate
(a term dropped, coefficients swapped) or of its tie-break survived every test that ran it alone
(mutants56b): the placements stayed valid, only different."""

from __future__ import annotations

import dataclasses

import pytest

from scheduler.benchgen import bench_request
from scheduler.devices import device_profile, model_preset
from scheduler.policies.lpt_assign import lpt_assignment
from scheduler.policies.problem import build_problem
from scheduler.types import Inventory, PlanRequest, Trajectory, Worker


def _two_kinds_of_one_speed() -> PlanRequest:
    """12 H100s, half with a smaller slot limit: two kinds whose estimates tie while no queue is near
    its slots, so each tie is the tie-break's to settle; equal units, long prompts (prefill counts)."""
    workers = tuple(
        Worker(f"w{i}", device_profile("H100"), max_num_seqs=64 if i % 2 else 256) for i in range(12)
    )
    batch = tuple(Trajectory(f"p{i}", 0, 4_000, 8_000, 2_000.0 + 500 * (i % 3)) for i in range(300))
    return PlanRequest(batch, Inventory(workers, model_preset("7b")))


def _long_prompts() -> PlanRequest:
    """A bench batch whose prompts are as long as its outputs: the KV and prefill terms decide."""
    request = bench_request(2_048, 16, seed=3)
    batch = tuple(dataclasses.replace(t, prompt_tokens=t.prompt_tokens * 40) for t in request.trajectories)
    return dataclasses.replace(request, trajectories=batch)


CASES = {
    "4096x32-s0": bench_request(4_096, 32, seed=0),
    "2048x64-s2": bench_request(2_048, 64, seed=2),
    "two-kinds-one-speed": _two_kinds_of_one_speed(),
    "long-prompts": _long_prompts(),
}


@pytest.mark.parametrize("request_", CASES.values(), ids=CASES.keys())
def test_plain_lpt_places_every_unit_where_the_general_path_does(request_: PlanRequest) -> None:
    problem = build_problem(request_)
    assert len(problem.active) > 8  # the plain loop's case: more than 8 workers, none restricted
    assert problem.unrestricted
    general = lpt_assignment(problem, scale=[1.0] * len(problem.costs))  # a scale: the general path
    assert lpt_assignment(problem) == general

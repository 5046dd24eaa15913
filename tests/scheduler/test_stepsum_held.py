"""The KV a run of decode steps holds, summed in closed form (``stepsum.held_time``), is each step's
context times that step's time, step by step, whichever term of the cost model leads the run.

The replay's ``KV use`` is this sum over a play. The devices' own costs are led by the memory read
nearly everywhere, so the simulator's tests rarely reach the compute-led runs or a run whose lead
changes midway (the closed form's second and third cases): the coefficients are scaled here until
each case occurs.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.costmodel import WorkerCost, worker_cost
from scheduler.devices import device_profile, model_preset
from scheduler.stepsum import decode_time, held_time
from scheduler.types import Worker

BASE = worker_cost(
    Worker("w", device_profile("H100"), max_num_seqs=64, kv_capacity_tokens=200_000), model_preset("7b")
)


def _scaled(factors: tuple[float, float, float, float], time_scale: float = 1.0) -> WorkerCost:
    """The H100's costs with the weight read, the KV read and the two compute terms scaled."""
    return dataclasses.replace(
        BASE,
        mem_base_s=BASE.mem_base_s * factors[0],
        mem_per_token_s=BASE.mem_per_token_s * factors[1],
        flops_per_seq_s=BASE.flops_per_seq_s * factors[2],
        flops_per_token_s=BASE.flops_per_token_s * factors[3],
        time_scale=time_scale,
    )


def _step_by_step(cost: WorkerCost, batch: int, context: float, steps: int) -> float:
    """Step ``k`` holds ``context + batch * k`` tokens for ``cost.step_time`` of that context."""
    return sum((context + batch * k) * cost.step_time(batch, context + batch * k) for k in range(steps))


def _leads(cost: WorkerCost, batch: int, context: float) -> str:
    """Which term of the cost model sets a step's time at ``context``."""
    memory = cost.mem_base_s + cost.mem_per_token_s * context
    compute = cost.flops_per_seq_s * batch + cost.flops_per_token_s * context
    return "memory" if memory >= compute else "compute"


@settings(max_examples=300, deadline=None)
@given(
    st.tuples(*[st.sampled_from([0.0, 0.01, 1.0, 100.0])] * 4),
    st.integers(1, 64),
    st.integers(0, 20_000),
    st.integers(0, 400),
    st.sampled_from([1.0, 1.7]),
)
def test_the_kv_held_over_a_run_is_each_steps_context_times_its_time(
    factors: tuple[float, float, float, float], batch: int, context: int, steps: int, time_scale: float
) -> None:
    cost = _scaled(factors, time_scale)
    assert held_time(cost, batch, context, steps) == pytest.approx(
        _step_by_step(cost, batch, context, steps), rel=1e-9, abs=1e-12
    )


@pytest.mark.parametrize(
    ("factors", "context", "first", "last"),
    [
        ((1.0, 0.01, 0.0, 100.0), 50_000.0, "memory", "compute"),  # the weight read, then attention
        ((0.0, 100.0, 100.0, 0.0), 1_000.0, "compute", "memory"),  # the per-sequence compute, then the KV
    ],
)
def test_a_run_whose_lead_changes_midway_holds_what_its_steps_hold(
    factors: tuple[float, float, float, float], context: float, first: str, last: str
) -> None:
    cost, batch, steps = _scaled(factors, 1.7), 16, 2_000
    assert (_leads(cost, batch, context), _leads(cost, batch, context + batch * (steps - 1))) == (first, last)
    assert held_time(cost, batch, context, steps) == pytest.approx(
        _step_by_step(cost, batch, context, steps), rel=1e-9
    )


def test_a_run_of_no_steps_holds_nothing_and_one_step_holds_its_context_for_its_time() -> None:
    assert held_time(BASE, 8, 5_000.0, 0) == 0.0
    assert held_time(BASE, 8, 5_000.0, 1) == pytest.approx(5_000.0 * decode_time(BASE, 8, 5_000.0, 1))

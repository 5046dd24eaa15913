"""The worker model: the closed form for queues admitted at once agrees with the event loop."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.costmodel import worker_cost
from scheduler.devices import device_profile, model_preset
from scheduler.finish import all_at_once_finish, worker_finish
from scheduler.types import Worker

QUEUES = st.lists(st.tuples(st.integers(1, 300), st.integers(1, 600)), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(
    QUEUES,
    st.sampled_from(["H100", "Ascend910B", "A100-80GB"]),
    st.integers(1, 12),
    st.integers(900, 8_000),
    st.booleans(),
)
def test_the_closed_form_equals_the_event_loop_whenever_it_applies(
    queue: list[tuple[int, int]], kind: str, slots: int, capacity: int, reserve: bool
) -> None:
    cost = worker_cost(
        Worker("w", device_profile(kind), max_num_seqs=slots, kv_capacity_tokens=capacity), model_preset("7b")
    )
    prompts, steps = [p for p, _ in queue], [n for _, n in queue]
    closed = all_at_once_finish(cost, prompts, steps, reserve)
    played = worker_finish(cost, prompts, steps, reserve)
    if closed is not None:
        assert closed == pytest.approx(played, rel=1e-12)
    if len(queue) > slots:
        assert closed is None  # a queue longer than the slots cannot start at once


def test_a_queue_that_outgrows_the_cache_is_left_to_the_event_loop() -> None:
    cost = worker_cost(
        Worker("w", device_profile("H100"), max_num_seqs=8, kv_capacity_tokens=2_000), model_preset("7b")
    )
    prompts, steps = [100] * 4, [400] * 4  # 4 x 500 tokens at the end: exactly the capacity
    assert all_at_once_finish(cost, prompts, steps) == pytest.approx(
        worker_finish(cost, prompts, steps), rel=1e-12
    )
    assert all_at_once_finish(cost, prompts, [401] * 4) is None  # one token more each: preemption

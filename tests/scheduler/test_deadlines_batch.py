"""Every queue's closed-form ends in one pass equal each queue's own closed form, to the last bit.

``planned_times`` (the steal deadlines the service publishes and the simulator guards with) takes
the closed form of all queues at once; the one-queue form (``at_once.all_at_once_ends``) is the
reference, including which queues do not run at once (too many items, a crowded or overflowing
cache) and so are left to the event loop.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.at_once import all_at_once_ends, ends_at_once
from scheduler.costmodel import WorkerCost, worker_cost
from scheduler.devices import device_profile, model_preset
from scheduler.types import Worker

MODEL = model_preset("7b")
DEVICES = ("H100", "H200", "A100", "Ascend910B")


@st.composite
def _queue(draw: st.DrawFn) -> tuple[WorkerCost, list[int], list[int]]:
    worker = Worker(
        "w",
        device_profile(draw(st.sampled_from(DEVICES))),
        max_num_seqs=draw(st.integers(1, 12)),
        kv_capacity_tokens=draw(st.integers(500, 20_000)),
        time_scale=draw(st.sampled_from((1.0, 1.5, 0.8))),
    )
    size = draw(st.integers(0, 14))
    prompts = draw(st.lists(st.integers(1, 1_500), min_size=size, max_size=size))
    steps = draw(st.lists(st.integers(1, 3_000) | st.sampled_from((5, 40, 40)), min_size=size, max_size=size))
    return worker_cost(worker, MODEL), prompts, steps


@settings(max_examples=300, deadline=None)
@given(st.lists(_queue(), max_size=8), st.booleans())
def test_the_ends_of_many_queues_at_once_are_each_queues_own_closed_form(
    queues: list[tuple[WorkerCost, list[int], list[int]]], reserve: bool
) -> None:
    expected = [all_at_once_ends(cost, prompts, steps, reserve) for cost, prompts, steps in queues]
    assert ends_at_once(queues, reserve) == expected


def test_no_queues_and_empty_queues_have_no_ends() -> None:
    cost = worker_cost(Worker("w", device_profile("H100")), MODEL)
    assert ends_at_once([], False) == []
    assert ends_at_once([(cost, [], []), (cost, [], [])], True) == [[], []]

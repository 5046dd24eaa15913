"""Every draw in one pass: each worker's finish on each draw is the one a play of that draw gives."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.costmodel import worker_cost
from scheduler.devices import device_profile, model_preset
from scheduler.finish import queue_finishes
from scheduler.finish_draws import drawn_finishes
from scheduler.types import Worker


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.sampled_from(["H100", "Ascend910B", "A100-80GB"]), min_size=1, max_size=5),
    st.integers(1, 40),
    st.integers(1, 12),
    st.integers(600, 12_000),
    st.integers(1, 6),
    st.booleans(),
    st.integers(0, 2**32 - 1),
)
def test_every_draw_and_its_stretched_copy_give_the_finish_of_playing_it_to_the_last_bit(
    kinds: list[str], items: int, slots: int, capacity: int, count: int, reserve: bool, seed: int
) -> None:
    """Queues that run at once on some draws and not on others (too many for the slots, prompts or
    lengths past a small cache: the event loop plays those), empty ones, equal lengths."""
    costs = [
        worker_cost(Worker(f"w{k}", device_profile(kind), max_num_seqs=slots, kv_capacity_tokens=capacity),
                    model_preset("7b"))
        for k, kind in enumerate(kinds)
    ]  # fmt: skip
    rng = np.random.default_rng(seed)
    prompts = rng.integers(1, 300, items).tolist()
    draws = rng.integers(1, 12, (count, items)) * rng.choice([1, 25], (count, items))  # ties, long ones
    stretch = rng.integers(1, 290, items)  # every item fits the smallest cache alone, stretched too
    owner = rng.integers(0, len(costs), items)
    queues = [rng.permutation(np.flatnonzero(owner == w)).tolist() for w in range(len(costs))]
    drawn, stretched = drawn_finishes(costs, prompts, queues, draws, stretch, reserve)
    for d, steps in enumerate(draws.tolist()):
        assert drawn[d].tolist() == queue_finishes(costs, prompts, steps, queues, reserve)
        longer = list(steps)
        for queue in queues:
            if queue:
                i = max(queue, key=lambda j: steps[j])  # the first of the longest, in queue order
                longer[i] = max(steps[i], int(stretch[i]))
        assert stretched[d].tolist() == queue_finishes(costs, prompts, longer, queues, reserve)

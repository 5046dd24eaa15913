"""The worker model's loops on locals (``scheduler.finish_loops``) play ``finish._WorkerRun``'s events."""

from __future__ import annotations

import dataclasses
import math
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import finish as finish_module
from scheduler import finish_loops
from scheduler.admission import RunningPeak
from scheduler.costmodel import WorkerCost, worker_cost
from scheduler.devices import device_profile, model_preset
from scheduler.finish import worker_finish
from scheduler.stepsum import decode_time
from scheduler.types import Worker


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 400), st.integers(0, 900)), min_size=1, max_size=60),
    st.sampled_from(["H100", "Ascend910B"]),
    st.integers(1, 40),
    st.integers(1_300, 8_000),  # every item fits alone (the validated case)
    st.booleans(),
    st.floats(0.0, 1.5) | st.just(math.inf),
)
def test_worker_finish_is_the_method_by_method_worker_model_to_the_last_bit(
    queue: list[tuple[int, int]], kind: str, slots: int, capacity: int, reserve: bool, share: float
) -> None:
    # the planner's plays run the loops; the class states the rules one method each: every event,
    # skipped test and wait search must agree. A play stopped at a bound the class reaches only with
    # its clock; the loops may stop sooner, on the work left (``finish_loops._sure``), and then
    # report at least the bound and at most the finish. One the bound never reaches is the whole play
    worker = Worker("w", device_profile(kind), max_num_seqs=slots, kv_capacity_tokens=capacity)
    cost = worker_cost(worker, model_preset("7b"))
    prompts, steps = [p for p, _ in queue], [n for _, n in queue]
    full = finish_module._WorkerRun(cost, prompts, steps, reserve).run()
    assert worker_finish(cost, prompts, steps, reserve) == full
    bound = share * full
    stopped = finish_module._WorkerRun(cost, prompts, steps, reserve).run(bound)
    played = worker_finish(cost, prompts, steps, reserve, stop_at=bound)
    if stopped < bound:
        assert played == stopped == full
    else:
        assert bound <= played <= full


def test_a_queue_in_waves_under_kv_admission_plays_as_the_method_by_method_model() -> None:
    # the case the property may draw rarely: many items, refused heads waiting for room between
    # completions (the wait search), a cache that holds a fraction of the queue
    cost = worker_cost(
        Worker("w", device_profile("Ascend910B"), max_num_seqs=24, kv_capacity_tokens=6_000),
        model_preset("7b"),
    )
    prompts = [100 + (37 * k) % 300 for k in range(200)]
    steps = [50 + (911 * k) % 1_400 for k in range(200)]
    assert (
        worker_finish(cost, prompts, steps, reserve=True)
        == finish_module._WorkerRun(cost, prompts, steps, True).run()
    )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 400), st.integers(0, 1_500)), min_size=1, max_size=120),
    st.integers(8, 64),
    st.integers(1_900, 12_000),  # every item fits alone; tens of items crowd the cache
)
def test_the_pieces_only_skip_work_a_play_testing_every_step_finishes_alike(
    queue: list[tuple[int, int]], slots: int, capacity: int
) -> None:
    # ``RunningPeak.covered`` settles most projected-peak tests from a few bounds; with it
    # certifying nothing, every test walks the running set: the same finish to the last bit
    worker = Worker("w", device_profile("H100"), max_num_seqs=slots, kv_capacity_tokens=capacity)
    cost = worker_cost(worker, model_preset("7b"))
    prompts, steps = [p for p, _ in queue], [n for _, n in queue]
    fast = worker_finish(cost, prompts, steps, reserve=True)
    with mock.patch.object(RunningPeak, "covered", return_value=0):
        assert worker_finish(cost, prompts, steps, reserve=True) == fast


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 400), st.integers(1, 900)), min_size=1, max_size=60),
    st.tuples(*[st.sampled_from([0.0, 0.01, 1.0, 100.0])] * 4),
    st.integers(1, 40),
    st.booleans(),
)
def test_decode_runs_led_by_memory_by_compute_or_by_both_in_turn_sum_as_the_cost_model_does(
    queue: list[tuple[int, int]], factors: tuple[float, float, float, float], slots: int, reserve: bool
) -> None:
    # the loops sum a run of decode steps inline where one term leads it all (``stepsum.decode_time``
    # written out); the devices' own costs are memory-led nearly everywhere, so the weights of the
    # weight read, the KV read and the two compute terms are scaled here until each case occurs
    worker = Worker("w", device_profile("H100"), max_num_seqs=slots, kv_capacity_tokens=4_000)
    base = worker_cost(worker, model_preset("7b"))
    cost = dataclasses.replace(
        base,
        mem_base_s=base.mem_base_s * factors[0],
        mem_per_token_s=base.mem_per_token_s * factors[1],
        flops_per_seq_s=base.flops_per_seq_s * factors[2],
        flops_per_token_s=base.flops_per_token_s * factors[3],
    )
    prompts, steps = [p for p, _ in queue], [n for _, n in queue]
    assert (
        worker_finish(cost, prompts, steps, reserve)
        == finish_module._WorkerRun(cost, prompts, steps, reserve).run()
    )


def test_a_decode_run_whose_lead_changes_midway_sums_as_the_cost_model_does() -> None:
    # the third case of the inline sum, which the property above may not draw: a run that starts
    # led by the weight read (the compute per sequence just under it) and ends led by the KV read
    worker = Worker("w", device_profile("H100"), max_num_seqs=8, kv_capacity_tokens=4_000)
    base = worker_cost(worker, model_preset("7b"))
    cost = dataclasses.replace(base, mem_base_s=base.mem_base_s * 0.01, flops_per_token_s=0.0)
    prompts, steps = [200] * 12, [100 * (k + 1) for k in range(12)]
    for reserve in (False, True):
        with mock.patch.object(finish_loops, "decode_time", wraps=decode_time) as summed:
            assert worker_finish(cost, prompts, steps, reserve) == (
                finish_module._WorkerRun(cost, prompts, steps, reserve).run()
            )
        assert summed.call_count == 1  # the case is reached, once, in either loop


def _crowded_910b() -> tuple[WorkerCost, list[int], list[int]]:
    """A cache-bound queue: a 910B whose cache holds a few of its 150 items at once, longest first
    (the order that preempts most), as the plateau pass's tail workers play."""
    cost = worker_cost(
        Worker("w", device_profile("Ascend910B"), max_num_seqs=64, kv_capacity_tokens=60_000),
        model_preset("7b"),
    )
    prompts = [200 + (37 * k) % 600 for k in range(150)]
    steps = sorted((300 + (911 * k) % 9_000 for k in range(150)), reverse=True)
    return cost, prompts, steps


@pytest.mark.parametrize("reserve", [False, True])
@pytest.mark.parametrize("share", [0.3, 0.8, 0.97, 1.0, 1.03])
def test_a_play_stopped_on_the_work_left_reports_at_least_its_bound_and_at_most_its_finish(
    reserve: bool, share: float
) -> None:
    # the loops stop where the clock plus a lower bound of the work left passes the bound: before
    # the clock gets there (a value the class's clock at the bound is not), never below the bound,
    # never past the finish, and a bound at or past the finish gets the whole play
    cost, prompts, steps = _crowded_910b()
    full = worker_finish(cost, prompts, steps, reserve)
    bound = share * full
    played = worker_finish(cost, prompts, steps, reserve, stop_at=bound)
    if share >= 1.0:  # at least the bound, at most the finish: the finish
        assert played == full
    else:
        assert bound <= played <= full
        assert played != finish_module._WorkerRun(cost, prompts, steps, reserve).run(bound)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 400), st.integers(0, 1_500)), min_size=1, max_size=80),
    st.integers(1, 64),
    st.integers(1_900, 12_000),
    st.booleans(),
)
def test_the_bound_of_the_work_left_is_at_most_the_whole_play(
    queue: list[tuple[int, int]], slots: int, capacity: int, reserve: bool
) -> None:
    # ``_sure`` at the start (nothing decoded or prefilled) is a lower bound of the play's finish in
    # any order: what lets a stopped play report a value, not a clock, and never a false one
    cost = worker_cost(
        Worker("w", device_profile("Ascend910B"), max_num_seqs=slots, kv_capacity_tokens=capacity),
        model_preset("7b"),
    )
    prompts, steps = [p for p, _ in queue], [n for _, n in queue]
    _, (kv, tokens, prompt) = finish_loops._bounded(prompts, steps, 1.0)
    assert finish_loops._sure(cost, 0.0, kv, tokens, prompt, max(steps)) <= worker_finish(
        cost, prompts, steps, reserve
    )

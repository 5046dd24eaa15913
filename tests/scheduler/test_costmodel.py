"""The cost model follows the formulas docs/cost-model.md states, and refuses what cannot run."""

from __future__ import annotations

import pytest

from scheduler.costmodel import speed_clusters, worker_cost
from scheduler.devices import device_profile, model_preset
from scheduler.errors import InvalidInputError
from scheduler.types import Worker

MODEL = model_preset("7b")


def test_prefill_is_two_flops_a_parameter_a_prompt_token_with_at_least_one_weight_read() -> None:
    device = device_profile("H100")
    worker = Worker("w", device, num_gpus=2, kv_capacity_tokens=100_000, time_scale=1.5)
    cost = worker_cost(worker, MODEL)
    flops = 2 * device.peak_tflops * 1e12 * device.compute_efficiency
    weight_read = (
        MODEL.params
        * MODEL.weight_bytes_per_param
        / (2 * device.hbm_bandwidth_gbs * 1e9 * device.bandwidth_efficiency)
    )
    for prompt in (1, 4_000):
        compute = 2 * MODEL.params * prompt / flops
        expected = 1.5 * (max(compute, weight_read) + device.step_overhead_s)
        assert cost.prefill_time(prompt) == pytest.approx(expected, rel=1e-12)
    assert 2 * MODEL.params * 4_000 / flops > weight_read  # the long prompt is the compute-bound case


def test_a_decode_step_is_the_slower_of_reading_weights_and_cache_and_computing_them() -> None:
    device = device_profile("H100")
    cost = worker_cost(Worker("w", device, num_gpus=2, kv_capacity_tokens=100_000, time_scale=1.5), MODEL)
    flops = 2 * device.peak_tflops * 1e12 * device.compute_efficiency
    bandwidth = 2 * device.hbm_bandwidth_gbs * 1e9 * device.bandwidth_efficiency
    weights = MODEL.params * MODEL.weight_bytes_per_param
    for batch, context in ((1, 500.0), (256, 1_000.0), (64, 90_000.0)):
        mem = (weights + context * MODEL.kv_bytes_per_token) / bandwidth
        compute = (2 * MODEL.params * batch + 4 * MODEL.layers * MODEL.hidden * context) / flops
        expected = 1.5 * (max(mem, compute) + device.step_overhead_s)
        assert cost.step_time(batch, context) == pytest.approx(expected, rel=1e-12)
    assert cost.step_time(256, 1_000.0) > cost.step_time(1, 1_000.0)  # a wide batch is compute-bound


def test_saturated_throughput_runs_as_many_sequences_as_slots_and_cache_allow() -> None:
    cost = worker_cost(Worker("w", device_profile("H100"), max_num_seqs=8, kv_capacity_tokens=10_000), MODEL)
    # short contexts: every slot runs; long ones: only as many as the cache holds (10,000 // 3,000 = 3)
    assert cost.saturated_tps(100.0) == pytest.approx(8 / cost.step_time(8, 800.0))
    assert cost.saturated_tps(3_000.0) == pytest.approx(3 / cost.step_time(3, 9_000.0))
    assert cost.saturated_tps(50_000.0) == pytest.approx(1 / cost.step_time(1, 50_000.0))  # never none


def test_single_sequence_speed_is_one_token_a_step_of_one_sequence_alone() -> None:
    # issue 2 names it beside the saturated throughput; the service converts a stated
    # decode_tokens_per_s into a time scale with it (service/api/convert.py)
    cost = worker_cost(Worker("w", device_profile("Ascend910B"), time_scale=2.0), MODEL)
    for context in (0.0, 8_000.0):
        assert cost.single_sequence_tps(context) == 1 / cost.step_time(1, context)
    assert cost.single_sequence_tps(0.0) > cost.single_sequence_tps(8_000.0)  # the cache read grows


def test_a_model_that_leaves_no_kv_cache_is_refused_naming_the_device() -> None:
    worker = Worker("small", device_profile("Ascend910B"))
    with pytest.raises(InvalidInputError, match="leaves no KV cache") as caught:
        worker_cost(worker, model_preset("32b"))
    assert caught.value.field == "inventory.workers[small].device"


def test_speed_clusters_keep_a_member_exactly_at_the_tolerance_with_its_fastest() -> None:
    assert speed_clusters([1.0, 1.1, 1.2], ["a", "b", "c"], 0.1) == [["a", "b"], ["c"]]
    # equal scales share a run even at zero tolerance
    assert speed_clusters([2.0, 1.0, 1.0], ["a", "b", "c"], 0.0) == [["b", "c"], ["a"]]


def test_a_stated_cache_of_zero_tokens_is_refused_too() -> None:
    with pytest.raises(InvalidInputError, match="leaves no KV cache"):
        worker_cost(Worker("empty", device_profile("H100"), kv_capacity_tokens=0), MODEL)

"""Roofline cost model of one decode engine: step time as a function of batch and context.

One decode step of a continuous-batching engine reads every weight once and the KV cache of every
running sequence once, and performs ~2 FLOPs per parameter per sequence plus attention FLOPs:

    mem_s(C)        = (W + C * kv) / (g * BW * eta_bw)
    compute_s(b, C) = (2 * P * b + 4 * layers * hidden * C) / (g * F * eta_f)
    step_s(b, C)    = time_scale * (max(mem_s, compute_s) + overhead)

with W = P * bytes_per_param weight bytes, kv = KV bytes per token, C = tokens held in the KV cache
by the b running sequences, g = tensor-parallel degree. Both terms are affine in C for fixed b, which
lets the simulator sum many steps in closed form. Prefill of p tokens is compute-bound:

    prefill_s(p) = time_scale * (max(2 * P * p / (g * F * eta_f), W / (g * BW * eta_bw)) + overhead)

KV capacity, when a worker does not state it, is what vLLM would allocate:
floor((g * memory * memory_utilization - W) / kv). See docs/cost-model.md for the derivation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TypeVar

from scheduler.devices import ModelPreset
from scheduler.errors import InvalidInputError
from scheduler.types import Worker

_GIB = float(1 << 30)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class WorkerCost:
    """Coefficients of one worker's step-time model, resolved once per (worker, model)."""

    worker_id: str
    mem_base_s: float  # weight-read time per step
    mem_per_token_s: float  # KV-read time per cached token per step
    flops_per_seq_s: float  # dense compute time per running sequence per step
    flops_per_token_s: float  # attention compute time per cached token per step
    overhead_s: float  # fixed per-step overhead
    time_scale: float  # measured/modelled multiplier
    prefill_per_token_s: float  # prefill compute time per prompt token
    kv_capacity_tokens: int  # KV cache size in tokens
    max_num_seqs: int  # concurrent sequence limit

    def step_time(self, batch: int, context_tokens: float) -> float:
        """Seconds for one decode step with ``batch`` running sequences holding ``context_tokens``."""
        mem = self.mem_base_s + self.mem_per_token_s * context_tokens
        compute = self.flops_per_seq_s * batch + self.flops_per_token_s * context_tokens
        return self.time_scale * (max(mem, compute) + self.overhead_s)

    def step_signature(self) -> tuple[float, ...]:
        """The coefficients that set step time: workers sharing it step identically."""
        return (
            self.mem_base_s,
            self.mem_per_token_s,
            self.flops_per_seq_s,
            self.flops_per_token_s,
            self.overhead_s,
            self.time_scale,
        )

    def prefill_time(self, prompt_tokens: int) -> float:
        """Seconds to prefill ``prompt_tokens`` (compute-bound, at least one weight read)."""
        compute = self.prefill_per_token_s * prompt_tokens
        return self.time_scale * (max(compute, self.mem_base_s) + self.overhead_s)

    def single_sequence_tps(self, context_tokens: float) -> float:
        """Decode tokens/s of one sequence running alone at ``context_tokens`` of context."""
        return 1.0 / self.step_time(1, context_tokens)

    def saturated_tps(self, context_per_seq: float) -> float:
        """Decode tokens/s with as many sequences as slots and KV allow, each at ``context_per_seq``."""
        batch = max(1, min(self.max_num_seqs, int(self.kv_capacity_tokens // max(context_per_seq, 1.0))))
        return batch / self.step_time(batch, batch * context_per_seq)

    def peak_tps(self) -> float:
        """An upper bound on decode tokens/s in any state: all slots busy, no KV to read."""
        return self.max_num_seqs / self.step_time(self.max_num_seqs, 0.0)

    def kv_token_steps_per_s(self) -> float:
        """An upper bound on KV-token-steps per second: C/step(C) grows with C, so full KV bounds it.

        At full KV at least one sequence runs, so the compute term is at least one sequence's worth;
        adding more sequences only lengthens the step, which keeps this an upper bound.
        """
        cap = float(self.kv_capacity_tokens)
        mem = self.mem_base_s + self.mem_per_token_s * cap
        compute = self.flops_per_seq_s + self.flops_per_token_s * cap
        return cap / (self.time_scale * (max(mem, compute) + self.overhead_s))


def derived_kv_capacity(worker: Worker, model: ModelPreset) -> int:
    """KV tokens an engine would allocate on ``worker`` for ``model`` (vLLM's memory accounting)."""
    usable = worker.num_gpus * worker.device.memory_gib * worker.device.memory_utilization * _GIB
    free = usable - model.params * model.weight_bytes_per_param
    return int(free // model.kv_bytes_per_token)


@lru_cache(maxsize=4096)
def worker_cost(worker: Worker, model: ModelPreset) -> WorkerCost:
    """Resolve ``worker`` running ``model`` into step-time coefficients; rejects models that don't fit."""
    dev, g = worker.device, worker.num_gpus
    bandwidth = g * dev.hbm_bandwidth_gbs * 1e9 * dev.bandwidth_efficiency
    flops = g * dev.peak_tflops * 1e12 * dev.compute_efficiency
    kv_cap = worker.kv_capacity_tokens
    if kv_cap is None:
        kv_cap = derived_kv_capacity(worker, model)
    if kv_cap <= 0:
        raise InvalidInputError(
            f"inventory.workers[{worker.worker_id}].device",
            dev.name,
            f"model {model.name} ({model.params:.3g} params) leaves no KV cache on {g} x {dev.name}",
        )
    return WorkerCost(
        worker_id=worker.worker_id,
        mem_base_s=model.params * model.weight_bytes_per_param / bandwidth,
        mem_per_token_s=model.kv_bytes_per_token / bandwidth,
        flops_per_seq_s=2.0 * model.params / flops,
        flops_per_token_s=4.0 * model.layers * model.hidden / flops,
        overhead_s=dev.step_overhead_s,
        time_scale=worker.time_scale,
        prefill_per_token_s=2.0 * model.params / flops,
        kv_capacity_tokens=kv_cap,
        max_num_seqs=worker.max_num_seqs,
    )


def speed_clusters(scales: Sequence[float], members: Sequence[T], tolerance: float) -> list[list[T]]:
    """``members`` (with these time scales) cut into runs, fastest first, each within
    ``tolerance`` (relative) of its fastest member: a single pass over the sorted scales, so that no
    member is closer in scale to another run than to its own by more than the tolerance."""
    runs: list[list[T]] = []
    first = 0.0
    for i in sorted(range(len(members)), key=lambda i: (scales[i], i)):
        if not runs or scales[i] > first * (1.0 + tolerance):
            runs.append([])
            first = scales[i]
        runs[-1].append(members[i])
    return runs

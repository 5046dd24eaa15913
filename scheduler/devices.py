"""Built-in accelerator profiles and model presets, from public specifications.

Sources (vendor datasheets; dense, i.e. without 2:4 sparsity):
- H100 SXM5 80GB: 3.35 TB/s HBM3, 989 TFLOP/s bf16 dense, 80 GB (NVIDIA H100 datasheet).
- H200 SXM 141GB: 4.8 TB/s HBM3e, 989 TFLOP/s bf16 dense, 141 GB (NVIDIA H200 datasheet).
- A100 SXM4 80GB: 2.039 TB/s HBM2e, 312 TFLOP/s bf16 dense, 80 GB (NVIDIA A100 datasheet).
- Ascend 910B (910B3): 1.6 TB/s HBM2e, 313 TFLOP/s fp16 dense, 64 GB (Huawei Atlas 800T A2 specs).

Model presets follow the Qwen2.5 configs (config.json on the model hubs): KV bytes per token =
2 (K and V) * layers * kv_heads * head_dim * 2 bytes (bf16). Efficiency factors are assumptions,
documented in docs/cost-model.md, and every value can be overridden by measured numbers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from scheduler.errors import UnknownNameError


@dataclass(frozen=True, slots=True)
class DeviceProfile:
    """What one accelerator offers to a decode loop."""

    name: str  # canonical kind, e.g. "H100"
    hbm_bandwidth_gbs: float  # peak HBM bandwidth, GB/s (1e9 bytes)
    peak_tflops: float  # peak dense bf16/fp16 tensor throughput, TFLOP/s
    memory_gib: float  # HBM capacity, GiB
    bandwidth_efficiency: float = 0.80  # share of peak bandwidth a decode kernel sustains
    compute_efficiency: float = 0.50  # share of peak FLOP/s a decode/prefill GEMM sustains
    memory_utilization: float = 0.90  # share of HBM the engine claims (vLLM gpu_memory_utilization)
    step_overhead_s: float = 0.002  # fixed per-step launch/scheduling overhead, seconds


@dataclass(frozen=True, slots=True)
class ModelPreset:
    """The parts of a transformer that set decode cost."""

    name: str
    params: float  # parameter count
    layers: int  # transformer layers
    hidden: int  # hidden size (query heads * head dim), sets attention FLOPs
    kv_bytes_per_token: int  # bytes of K+V cache per token, all layers
    weight_bytes_per_param: float = 2.0  # bf16 weights


DEVICES: dict[str, DeviceProfile] = {
    "H100": DeviceProfile("H100", hbm_bandwidth_gbs=3350.0, peak_tflops=989.0, memory_gib=80.0),
    "H200": DeviceProfile("H200", hbm_bandwidth_gbs=4800.0, peak_tflops=989.0, memory_gib=141.0),
    "A100-80GB": DeviceProfile("A100-80GB", hbm_bandwidth_gbs=2039.0, peak_tflops=312.0, memory_gib=80.0),
    "Ascend910B": DeviceProfile("Ascend910B", hbm_bandwidth_gbs=1600.0, peak_tflops=313.0, memory_gib=64.0),
}

# Accepted spellings -> canonical kind, after ``_normalized``: lower case, spaces and underscores as
# dashes, no ``nvidia-`` prefix, so the names ``nvidia-smi`` prints ("NVIDIA H100 80GB HBM3") and GPU
# feature discovery's node label carries ("NVIDIA-H100-80GB-HBM3") are accepted as they are. Only
# names that identify the profiled part: an H100 PCIe or NVL (HBM2e, other clocks) or an A100 PCIe
# is another device, refused by name rather than planned with the SXM figures.
_ALIASES = {
    "h100": "H100",
    "h100-sxm": "H100",
    "h100sxm": "H100",
    "h100-sxm5": "H100",
    "h100-sxm5-80gb": "H100",
    "h100-80gb-hbm3": "H100",
    "h200": "H200",
    "h200-sxm": "H200",
    "h200-141gb-hbm3e": "H200",
    "a100": "A100-80GB",
    "a100-80gb": "A100-80GB",
    "a100-sxm4-80gb": "A100-80GB",
    "ascend910b": "Ascend910B",
    "ascend-910b": "Ascend910B",
    "910b": "Ascend910B",
    "ascend910b3": "Ascend910B",
    "ascend-910b3": "Ascend910B",
    "910b3": "Ascend910B",
}


def _normalized(kind: str) -> str:
    """``kind`` in the aliases' spelling (see ``_ALIASES``)."""
    name = re.sub(r"[\s_]+", "-", kind.strip().lower())
    return name.removeprefix("nvidia-")


MODELS: dict[str, ModelPreset] = {
    # Qwen2.5-1.5B: 28 layers, 2 KV heads x 128 -> 2*28*2*128*2 = 28,672 B/token.
    "1.5b": ModelPreset("1.5b", params=1.54e9, layers=28, hidden=1536, kv_bytes_per_token=28_672),
    # Qwen2.5-7B: 28 layers, 4 KV heads x 128 -> 57,344 B/token.
    "7b": ModelPreset("7b", params=7.62e9, layers=28, hidden=3584, kv_bytes_per_token=57_344),
    # Qwen2.5-14B: 48 layers, 8 KV heads x 128 -> 196,608 B/token.
    "14b": ModelPreset("14b", params=14.7e9, layers=48, hidden=5120, kv_bytes_per_token=196_608),
    # Qwen2.5-32B: 64 layers, 8 KV heads x 128 -> 262,144 B/token.
    "32b": ModelPreset("32b", params=32.8e9, layers=64, hidden=5120, kv_bytes_per_token=262_144),
}

DEFAULT_MODEL = "7b"


def device_profile(kind: str) -> DeviceProfile:
    """Return the built-in profile for ``kind``, accepting common spellings (``H100``, ``910B``) and
    the names GPU tooling reports for the profiled parts, so an inventory can be built from a node
    label or ``nvidia-smi`` without a lookup table of the user's own."""
    canonical = _ALIASES.get(_normalized(kind), kind.strip())
    if canonical not in DEVICES:
        raise UnknownNameError("device", kind, list(DEVICES))
    return DEVICES[canonical]


def model_preset(name: str) -> ModelPreset:
    """Return the model preset ``name`` (``1.5b``, ``7b``, ``14b``, ``32b``; case-insensitive)."""
    key = name.strip().lower()
    if key not in MODELS:
        raise UnknownNameError("model", name, list(MODELS))
    return MODELS[key]

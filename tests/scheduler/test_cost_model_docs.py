"""docs/cost-model.md's tables are the profiles and presets in ``scheduler/devices.py`` and what the
cost model computes from them: a reader sizing a pool from the page gets the figures a plan uses."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scheduler.costmodel import worker_cost
from scheduler.devices import DEVICES, MODELS, device_profile, model_preset
from scheduler.types import Worker

PAGE = Path(__file__).resolve().parents[2] / "docs" / "cost-model.md"


def rows(heading: str) -> list[list[str]]:
    """The body rows of the first table after the line ``heading``, each cell stripped of backticks."""
    section = PAGE.read_text().split(heading, 1)[1]
    table = re.search(r"^\|.*?(?=\n\n|\Z)", section, re.MULTILINE | re.DOTALL)
    assert table is not None, heading
    lines = table.group().splitlines()[2:]  # past the header and its rule
    return [[cell.strip().strip("`") for cell in line.strip("|").split("|")] for line in lines]


def number(text: str) -> float:
    """The first number of a cell: ``1,082,404`` -> 1082404, ``3.35 TB/s HBM3`` -> 3.35."""
    found = re.search(r"[0-9][0-9,]*(?:\.[0-9]+)?(?:e[0-9]+)?", text)
    assert found is not None, text
    return float(found.group().replace(",", ""))


def test_the_device_table_gives_each_profile_its_bandwidth_peak_and_memory() -> None:
    table = {row[0].split()[0].strip("`"): row for row in rows("Dense values, without 2:4 sparsity:")}
    assert sorted(table) == sorted(DEVICES)
    for kind, (_, bandwidth, tflops, memory, _source) in table.items():
        profile = DEVICES[kind]
        assert number(bandwidth) * 1000 == pytest.approx(profile.hbm_bandwidth_gbs), kind
        assert number(tflops) == profile.peak_tflops, kind
        assert number(memory) == profile.memory_gib, kind


def test_the_model_table_gives_each_preset_its_size_and_kv_bytes() -> None:
    table = {row[0]: row for row in rows("## Model presets")}
    assert sorted(table) == sorted(MODELS)
    for name, (_, params, layers, hidden, heads, kv_bytes) in table.items():
        preset = MODELS[name]
        kv_heads, head_dim = (int(part) for part in heads.split(" x "))
        assert (number(params), number(layers), number(hidden)) == (
            preset.params,
            preset.layers,
            preset.hidden,
        )
        assert number(kv_bytes) == preset.kv_bytes_per_token == 2 * preset.layers * kv_heads * head_dim * 2


def test_the_7b_table_is_what_the_cost_model_computes_on_one_device() -> None:
    """Capacity exact, the step to its 0.01 ms, throughput to the token, the KV rate to 3 digits."""
    table = rows("Qwen2.5-7B (57,344 KV bytes per token) on one device")
    assert len(table) == len(DEVICES)
    kinds = {"H100 SXM": "H100", "Ascend 910B": "Ascend910B"}
    for label, capacity, step, peak, kv_rate in table:
        cost = worker_cost(Worker("w", device_profile(kinds.get(label, label))), model_preset("7b"))
        assert number(capacity) == cost.kv_capacity_tokens, label
        assert number(step) == round(cost.step_time(1, 0) * 1000, 2), label
        assert number(peak) == round(cost.peak_tps()), label
        assert kv_rate == f"{cost.kv_token_steps_per_s():.2e}".replace("e+0", "e"), label

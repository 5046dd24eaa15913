"""The step-time model the engine-sim tests run their simulated engines on."""

from __future__ import annotations

from scheduler.costmodel import WorkerCost
from service.engine_sim.app import build_config


def sim_cost(**overrides: object) -> WorkerCost:
    """An H100's cost at a hundredth of real time with 8 slots, ``overrides`` taken as
    ``build_config``'s arguments (a KV capacity, another time scale)."""
    settings: dict[str, object] = {"time_scale": 0.01, "max_num_seqs": 8}
    settings.update(overrides)
    return build_config("H100", **settings).cost  # type: ignore[arg-type]

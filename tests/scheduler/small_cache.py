"""Hedged-order requests: items on one H100 whose small KV cache runs them in waves, medians spread
over the cap's range and each p90 a set multiple of its median.

The hedged-order tests and the tests of how the hedge is priced by its waves plan them; they share
the builder here rather than through one test module's private name, so a change to it reaches both.
"""

from __future__ import annotations

import numpy as np

from scheduler.devices import device_profile, model_preset
from scheduler.types import Inventory, PlanRequest, Trajectory, Worker

CAP = 8_192  # each item's max_new_tokens


def small_cache_request(items: int, spread: float, kv_capacity: int, seed: int) -> PlanRequest:
    """One H100 with a small cache; medians spread over the cap's range, p90 ``spread`` x the median."""
    rng = np.random.default_rng(seed)
    batch = []
    for i in range(items):
        median = float(rng.uniform(0.2, 0.97)) * CAP
        quantiles = {0.5: median, 0.9: min(float(CAP), median * spread)}
        batch.append(Trajectory(f"p{i}", 0, 200, CAP, median, quantiles))
    worker = Worker("h100-0", device_profile("H100"), kv_capacity_tokens=kv_capacity)
    return PlanRequest(tuple(batch), Inventory((worker,), model_preset("7b")), kv_admission=True)

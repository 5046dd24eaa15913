"""Queues that run in waves: with equal predictions the length-aware policies plan no slower than
the length-blind ones (``scheduler.policies.waves``)."""

from __future__ import annotations

import pytest

from scheduler.devices import device_profile, model_preset
from scheduler.planner import plan
from scheduler.types import Inventory, PlanRequest, Trajectory, Worker


def _equal_batch(slots: int, items: int) -> PlanRequest:
    """Two H100s and two Ascend 910Bs, ``items`` trajectories all predicted at 1,000 tokens: every
    job's first step, where the fallback predictor gives each sample the same length."""
    workers = [Worker(f"h{i}", device_profile("H100"), max_num_seqs=slots) for i in range(2)]
    workers += [Worker(f"a{i}", device_profile("Ascend910B"), max_num_seqs=slots) for i in range(2)]
    batch = tuple(Trajectory(f"p{i // 4}", i % 4, 200, 4_096, 1_000.0) for i in range(items))
    return PlanRequest(batch, Inventory(tuple(workers), model_preset("7b")), time_budget_s=1.0)


@pytest.mark.parametrize(("slots", "items"), [(32, 96), (16, 96), (64, 174)])
def test_with_equal_predictions_lpt_and_cpsat_plan_no_slower_than_the_length_blind_baselines(
    slots: int, items: int
) -> None:
    request = _equal_batch(slots, items)
    baseline = min(plan(request, name).predicted_makespan_s for name in ("round_robin", "least_loaded"))
    for name in ("lpt", "cpsat"):
        assert plan(request, name).predicted_makespan_s <= baseline * (1 + 1e-9), name

"""Hypothesis strategies for plan requests small enough to simulate, with every constraint in play.

KV caches are a few thousand tokens and slot limits single digits, so admission waits, preemption,
pins, exclusions and prefix affinity all occur in a few dozen trajectories; workers run at their
device's speed or at a learned scale of it, as the service's pools do after their first actuals.
"""

from __future__ import annotations

from hypothesis import strategies as st

from scheduler.devices import device_profile, model_preset
from scheduler.types import Inventory, PlanRequest, Trajectory, Worker

DEVICES = ("H100", "Ascend910B", "A100-80GB")


@st.composite
def plan_requests(
    draw: st.DrawFn,
    max_groups: int = 6,
    max_workers: int = 4,
    max_samples: int = 4,
    affinity: bool | None = None,
) -> PlanRequest:
    """A valid request: 1-``max_groups`` prompts x 1-``max_samples`` samples on 1-``max_workers``
    mixed workers, with prefix affinity as ``affinity`` says (None: either)."""
    workers = tuple(
        Worker(
            worker_id=f"w{i}",
            device=device_profile(draw(st.sampled_from(DEVICES))),
            max_num_seqs=draw(st.integers(1, 8)),
            kv_capacity_tokens=draw(st.integers(1_200, 6_000)),
            # learned speeds (``service.speeds.model``): one scale a worker, a few percent apart
            time_scale=draw(st.just(1.0) | st.floats(0.85, 1.15)),
        )
        for i in range(draw(st.integers(1, max_workers)))
    )
    ids = [w.worker_id for w in workers]
    excluded = frozenset(draw(st.sets(st.sampled_from(ids), max_size=len(ids) - 1)))
    allowed = [w for w in ids if w not in excluded]
    affinity = draw(st.booleans()) if affinity is None else affinity
    trajectories = []
    for g in range(draw(st.integers(1, max_groups))):
        prompt = draw(st.integers(1, 200))
        group_pin = draw(st.none() | st.sampled_from(allowed)) if draw(st.integers(0, 4)) == 0 else None
        for s in range(draw(st.integers(1, max_samples))):
            cap = draw(st.integers(1, 800))
            trajectories.append(
                Trajectory(
                    prompt_id=f"p{g}",
                    sample_idx=s,
                    prompt_tokens=prompt,
                    max_new_tokens=cap,
                    predicted_tokens=draw(st.floats(1.0, float(cap), allow_nan=False)),
                    pinned_worker=group_pin,
                )
            )
    return PlanRequest(
        trajectories=tuple(trajectories),
        inventory=Inventory(workers, model_preset(draw(st.sampled_from(("1.5b", "7b"))))),
        time_budget_s=0.5,
        prefix_affinity=affinity,
        kv_admission=draw(st.booleans()),
        excluded_workers=excluded,
        seed=draw(st.integers(0, 3)),
    )

"""When the plan expects each trajectory to start and end: the deadlines that guard work stealing.

A steal helps only if the thief finishes the item before its planned owner would have. The plan
states each worker's finish but not each item's; this module plays every worker's ordered queue
alone at PREDICTED lengths (the simulator's engine, the same rules as the planner's finish model)
and reads off each item's first admission and completion. The simulator uses them as steal
deadlines (``scheduler.sim_pool``), and the service publishes them with the plan so the delivery
layer's steal script applies the same rule (service/delivery/publisher.py).

Shared-queue plans (``Plan.dispatch_order``) have no planned owner per item, hence no deadlines.
Pure and deterministic: no I/O; one play costs about as much as one static simulation.

The rule that reads them (an owner's lateness, and whether a thief beats it) is
``scheduler.stealguard``, numpy-free: the delivery client passes its margin to the steal script,
and a sidecar should not load numpy for one constant.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np

from scheduler.admission import WATERMARK
from scheduler.at_once import ends_at_once
from scheduler.costmodel import WorkerCost, worker_cost
from scheduler.errors import InvalidInputError
from scheduler.sim_alone import play_queue
from scheduler.sim_ledger import Ledger
from scheduler.stepsum import planned_steps, planned_steps_array
from scheduler.types import Inventory, Plan, Trajectory


class PlannedTime(NamedTuple):
    """One item's predicted life on its planned worker, seconds from the step's start."""

    start_s: float  # first admission, at predicted lengths
    end_s: float  # completion, at predicted lengths: the item's steal deadline


def planned_times(
    plan: Plan,
    trajectories: Sequence[Trajectory],
    inventory: Inventory,
    *,
    kv_admission: bool,
    watermark: float = 0.01,
    resume_preempted: bool = False,
) -> dict[str, PlannedTime]:
    """Each planned item's predicted start and end on its planned worker; {} for a shared-queue plan.

    ``kv_admission``, ``watermark`` and ``resume_preempted`` are the engine rules the plan will be
    played under (``SimOptions``; the sidecar's own for a published plan). Raises
    ``InvalidInputError`` when the plan names a worker or trajectory it was not given.
    """
    if plan.dispatch_order:
        return {}
    by_key = {t.key: t for t in trajectories}
    workers = {w.worker_id: w for w in inventory.workers}
    queues: list[tuple[tuple[str, ...], WorkerCost, list[int], list[int]]] = []
    for n, wp in enumerate(plan.workers):
        if not wp.items:
            continue
        worker = workers.get(wp.worker_id)
        if worker is None:
            raise InvalidInputError(f"plan.workers[{n}].worker_id", wp.worker_id, "not in the inventory")
        items = [_lookup(by_key, key, n) for key in wp.items]
        predicted = _steps([t.predicted_tokens for t in items])
        queues.append(
            (wp.items, worker_cost(worker, inventory.model), [t.prompt_tokens for t in items], predicted)
        )
    # A queue that runs at once (the common case) ends each item where the closed form says, at a
    # sliver of the event loop's cost (4,096 x 32: ~40 ms a plan played, a few closed); every
    # queue's closed form in one vectorised pass, since one numpy pass per queue cost more
    # than the arithmetic (1,024 x 16: ~6 ms of the publish, against ~1.5 ms at once). The closed
    # form tests admission at V0's watermark; a queue admitted whole under it is admitted whole under
    # any smaller one (vLLM V1's 0) and, never evicted, ends alike whatever an eviction would keep.
    closed = (
        ends_at_once([(c, p, s) for _, c, p, s in queues], kv_admission)
        if watermark <= WATERMARK
        else [None] * len(queues)
    )
    out: dict[str, PlannedTime] = {}
    for (keys, cost, prompts, planned), ends in zip(queues, closed, strict=True):
        if ends is not None:
            out.update(zip(keys, (PlannedTime(0.0, end) for end in ends), strict=True))
            continue
        ledger = Ledger(list(keys), prompts, planned, list(planned))
        play_queue(cost, ledger, watermark=watermark, kv_admission=kv_admission, resume=resume_preempted)
        out.update(zip(keys, map(PlannedTime._make, zip(ledger.start, ledger.end, strict=True)), strict=True))
    return out


def _steps(predicted: list[float]) -> list[int]:
    """``planned_steps`` of each prediction, in one numpy pass where all are finite (as validated
    requests' are); otherwise one by one, so a bad value fails as it always did."""
    values = np.asarray(predicted, dtype=np.float64)
    if bool(np.isfinite(values).all()):
        return [int(v) for v in planned_steps_array(values).tolist()]
    return [planned_steps(v) for v in predicted]


def _lookup(by_key: Mapping[str, Trajectory], key: str, n: int) -> Trajectory:
    trajectory = by_key.get(key)
    if trajectory is None:
        raise InvalidInputError(f"plan.workers[{n}].items", key, "names no trajectory of the batch")
    return trajectory

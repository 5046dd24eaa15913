"""When the plan expects each trajectory to start and end: the deadlines that guard work stealing.

A steal helps only if the thief finishes the item before its planned owner would have. The plan
states each worker's finish but not each item's; this module plays every worker's ordered queue
alone at PREDICTED lengths (the simulator's engine, the same rules as the planner's finish model)
and reads off each item's first admission and completion. The simulator uses them as steal
deadlines (``scheduler.sim_pool``), and the service publishes them with the plan so the delivery
layer's steal script applies the same rule (service/delivery/publisher.py).

Shared-queue plans (``Plan.dispatch_order``) have no planned owner per item, hence no deadlines.
Pure and deterministic: no I/O; one play costs about as much as one static simulation.

The guard: an owner that has not started the head of its queue by that item's planned start runs
late (``lateness``), and its remaining plan shifts by as much: an item planned to end at ``end`` is
projected to end at ``end + max(0, now - head_start)``. A thief takes the item only if
``now + its own estimate`` is no later, i.e. its estimate is at most ``end - min(now, head_start)``:
the time left to the deadline while the owner is on time, the owner's planned time from its next
start to the item's end once it is late. And, since the item's true length is unknown, the steal
must still pay off if the item runs ``LENGTH_MARGIN`` (4) times its prediction (``beats_owner``):
measured on short-cot replays (``trace synth --profile short-cot``, 8 H100 + 8 Ascend 910B, steps
3-5), slower Ascends that met every deadline at predicted lengths took under-predicted H100 tail
items and ran them last: lpt 157.1 s without stealing, 178.9 s with the deadline rule alone; with
a margin of 2: 178.9 s, 4: 157.5 s (344 steals), unbounded (the thief no slower on the item at all):
157.1 s (0 steals), which also refused near-equal workers the steals that rescue a serial owner.

A shift, not a stretch: when the owner is late because
lengths run over their predictions, the thief's estimate (at the predicted length) is short by the
same factor, and stretching only the owner's side let slow thieves take items they then finished
last (measured: tests/scheduler/test_steal_guard.py). For a given estimate the condition tightens
with time while the owner keeps to its plan, and stays as it is once it runs late: the shift
assumes a late owner still works. One that has run nothing of the schedule for a lease TTL past its
head's planned start (its engine died) is stalled, and the delivery layer's steal script lifts the
guard for it (service/delivery/lua/steal.lua); a simulated worker never stalls, so the simulator
needs no such rule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from scheduler.costmodel import worker_cost
from scheduler.errors import InvalidInputError
from scheduler.finish import WATERMARK, all_at_once_ends
from scheduler.sim_engine import Ledger, play_queue
from scheduler.stepsum import planned_steps
from scheduler.types import Inventory, Plan, Trajectory

LENGTH_MARGIN = 4.0  # a steal must still pay off if the item runs this many times its prediction


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
    out: dict[str, PlannedTime] = {}
    for n, wp in enumerate(plan.workers):
        if not wp.items:
            continue
        worker = workers.get(wp.worker_id)
        if worker is None:
            raise InvalidInputError(f"plan.workers[{n}].worker_id", wp.worker_id, "not in the inventory")
        items = [_lookup(by_key, key, n) for key in wp.items]
        planned = [planned_steps(t.predicted_tokens) for t in items]
        prompts = [t.prompt_tokens for t in items]
        cost = worker_cost(worker, inventory.model)
        # A queue that runs at once (the common case) ends each item where the closed form says,
        # at a sliver of the event loop's cost (4,096 x 32: ~40 ms a plan played, a few closed)
        ends = all_at_once_ends(cost, prompts, planned, kv_admission) if watermark == WATERMARK else None
        if ends is not None:
            out.update(zip(wp.items, (PlannedTime(0.0, end) for end in ends), strict=True))
            continue
        ledger = Ledger(list(wp.items), prompts, planned, list(planned))
        play_queue(cost, ledger, watermark=watermark, kv_admission=kv_admission, resume=resume_preempted)
        out.update(
            zip(wp.items, map(PlannedTime._make, zip(ledger.start, ledger.end, strict=True)), strict=True)
        )
    return out


def lateness(head_start_s: float, now_s: float) -> float:
    """How far behind its plan an owner runs: ``now`` minus the planned start of the first item it
    has not started yet (``head_start_s``), or 0 while that start is still ahead."""
    return max(0.0, now_s - head_start_s)


def beats_owner(now_s: float, seconds: float, owner_start_s: float, owner_end_s: float) -> bool:
    """Whether a thief starting now and needing ``seconds`` (at the predicted length) ends an item
    before its owner would, which runs it from ``owner_start_s`` to ``owner_end_s`` (projected),
    both at the predicted length and if the item runs ``LENGTH_MARGIN`` times longer (both run
    times scale with the true length; the condition is linear in it, so the two ends cover every
    length in between). A slow thief that wins at the prediction loses on an under-predicted item,
    the long tail a step waits for (module docstring)."""
    if now_s + seconds > owner_end_s:
        return False
    span = owner_end_s - owner_start_s
    return now_s + LENGTH_MARGIN * seconds <= owner_start_s + LENGTH_MARGIN * span


def _lookup(by_key: Mapping[str, Trajectory], key: str, n: int) -> Trajectory:
    trajectory = by_key.get(key)
    if trajectory is None:
        raise InvalidInputError(f"plan.workers[{n}].items", key, "names no trajectory of the batch")
    return trajectory

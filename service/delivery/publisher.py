"""Turn a plan into a published schedule: the bridge from the pure core to Redis.

The planner's ``Plan`` names trajectories by key and orders each worker's queue; the delivery items
add what a worker needs to run one (prompt length, cap, predicted length, the prompt payload).
Shared-queue plans (``Plan.dispatch_order``) become the shared FIFO every worker pulls from.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from scheduler.errors import InvalidInputError
from scheduler.types import Plan, Trajectory
from service.delivery.protocol import Delivery
from service.delivery.records import DeliveryItem, LeaseSettings, PublishedSchedule, PublishOutcome


def delivery_item(trajectory: Trajectory, payload: Mapping[str, Any] | None = None) -> DeliveryItem:
    """The item a worker receives for one planned trajectory."""
    return DeliveryItem(
        key=trajectory.key,
        prompt_id=trajectory.prompt_id,
        sample_idx=trajectory.sample_idx,
        prompt_tokens=trajectory.prompt_tokens,
        max_new_tokens=trajectory.max_new_tokens,
        predicted_tokens=float(trajectory.predicted_tokens),
        payload=dict(payload or {}),
    )


def schedule_from_plan(
    schedule_id: str,
    plan: Plan,
    trajectories: Iterable[Trajectory],
    payloads: Mapping[str, Mapping[str, Any]] | None = None,
    lease: LeaseSettings | None = None,
) -> PublishedSchedule:
    """Build the schedule to publish; ``payloads`` maps a prompt id to its JSON payload.

    Raises ``InvalidInputError`` when the plan names a trajectory it was not given.
    """
    by_key = {t.key: t for t in trajectories}
    prompts = payloads or {}

    def items(field: str, keys: Iterable[str]) -> tuple[DeliveryItem, ...]:
        out = []
        for key in keys:
            if key not in by_key:
                raise InvalidInputError(field, key, "plan names a trajectory that was not given")
            traj = by_key[key]
            out.append(delivery_item(traj, prompts.get(traj.prompt_id)))
        return tuple(out)

    # A shared-queue plan's per-worker lists only forecast who runs what; the FIFO is the truth, and
    # every worker still gets an (empty) queue so it is announced the schedule and reported on.
    shared = items("plan.dispatch_order", plan.dispatch_order)
    queues = {
        w.worker_id: () if shared else items(f"plan.workers[{w.worker_id}]", w.items) for w in plan.workers
    }
    return PublishedSchedule(
        schedule_id=schedule_id,
        queues=queues,
        kv_admission=plan.kv_admission,
        lease=lease or LeaseSettings(),
        shared=shared,
        seconds_per_token=seconds_per_token(plan, by_key),
    )


def seconds_per_token(plan: Plan, by_key: Mapping[str, Trajectory]) -> dict[str, float]:
    """Each worker's predicted seconds per predicted token: its predicted finish over its queue's tokens.

    Steal victims are ranked by predicted TIME left, as in the simulator: a queue of 10,000 tokens on
    a worker that plans them at 0.02 s each holds more work than 20,000 on one at 0.005 s. The plan's
    own finish times carry everything the planner knew about the worker (device, measured time
    scale, batching, KV). Workers with no planned tokens or no finish are left out (the protocol
    gives them the median pace).
    """
    paces: dict[str, float] = {}
    for worker in plan.workers:
        tokens = sum(by_key[key].predicted_tokens for key in worker.items if key in by_key)
        if tokens > 0 and worker.predicted_finish_s > 0:
            paces[worker.worker_id] = worker.predicted_finish_s / tokens
    return paces


def publish_plan(
    delivery: Delivery,
    schedule_id: str,
    plan: Plan,
    trajectories: Iterable[Trajectory],
    payloads: Mapping[str, Mapping[str, Any]] | None = None,
    lease: LeaseSettings | None = None,
) -> PublishOutcome:
    """Publish a plan for its workers to pull (atomic, idempotent per ``schedule_id``)."""
    return delivery.publish(schedule_from_plan(schedule_id, plan, trajectories, payloads, lease))

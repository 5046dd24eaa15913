"""Turn a plan into a published schedule: the bridge from the pure core to Redis.

The planner's ``Plan`` names trajectories by key and orders each worker's queue; the delivery items
add what a worker needs to run one (prompt length, cap, predicted length, the prompt payload).
Shared-queue plans (``Plan.dispatch_order``) become the shared FIFO every worker pulls from.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from scheduler.costmodel import worker_cost
from scheduler.deadlines import PlannedTime, planned_times
from scheduler.errors import InvalidInputError
from scheduler.sim_rules import engine_rules
from scheduler.types import Inventory, Plan, Trajectory
from service.delivery.outcomes import PublishOutcome
from service.delivery.protocol import Delivery
from service.delivery.records import DeliveryItem, LeaseSettings, PublishedSchedule


def delivery_item(
    trajectory: Trajectory,
    payload: Mapping[str, Any] | None = None,
    planned: PlannedTime | None = None,
    pinned: bool | None = None,
    key: str | None = None,
) -> DeliveryItem:
    """The item a worker receives for one planned trajectory (``planned``: its steal deadline;
    ``pinned``: whether it is bound to its worker, by default whether the trajectory names one;
    ``key``: ``trajectory.key``, when the caller has it already). Fields go positionally (~1 us an
    item less than by keyword, 1 ms of a 1,024-item publish), in ``DeliveryItem``'s order, which
    ``tests/service/delivery/test_publisher.py`` checks field by field."""
    return DeliveryItem(
        trajectory.key if key is None else key,
        trajectory.prompt_id,
        trajectory.sample_idx,
        trajectory.prompt_tokens,
        trajectory.max_new_tokens,
        float(trajectory.predicted_tokens),
        dict(payload or {}),
        trajectory.group_id or trajectory.prompt_id,
        trajectory.pinned_worker is not None if pinned is None else pinned,
        None if planned is None else _ms(planned.start_s),
        None if planned is None else _ms(planned.end_s),
    )


def _ms(seconds: float) -> int:
    return max(0, math.ceil(seconds * 1000.0))


def schedule_from_plan(
    schedule_id: str,
    plan: Plan,
    trajectories: Iterable[Trajectory],
    payloads: Mapping[str, Mapping[str, Any]] | None = None,
    lease: LeaseSettings | None = None,
    prefix_affinity: bool = False,
    inventory: Inventory | None = None,
    drained: Collection[str] = frozenset(),
    *,
    engine: str,
) -> PublishedSchedule:
    """Build the schedule to publish; ``payloads`` maps a prompt id to its JSON payload.

    With the ``inventory`` the plan was made for, each queued item carries its steal deadline: when
    the plan, played at predicted lengths (``scheduler.deadlines``), has its planned worker finish it;
    the steal script leaves it to its owner unless a thief would finish it sooner. Without one (or
    for a shared-queue plan) items have no deadline and steals are not time-guarded.

    Pins and ``prefix_affinity`` (the request's) travel with the schedule so that the steal script
    honours what the simulator honours: a pinned item never moves (and skips the shared FIFO for its
    worker's own queue, in dispatch order), and under affinity a steal moves only whole groups
    and a pin on one sample binds its whole group (``pinned_workers``).
    With the ``inventory``, each worker's KV capacity travels too, so that no claim or steal hands a
    worker an item its cache cannot hold at its cap (``PublishedSchedule.kv_capacity_tokens``).
    ``drained`` (the request's ``excluded_workers``) travel too: the planner gave them nothing, and
    no claim from the shared FIFO, steal or failed item's retry hands them anything either (the
    simulator's excluded workers), nor are they announced the schedule.
    ``engine`` (the request's, ``scheduler.sim_rules``): the rules the deadlines are played by, as the
    simulator plays its steal deadlines by its engine's (``simulator._steal_deadlines``), and the engine
    stored as the one the step was planned for. Required, with no default: the library's (``vllm-v0``)
    is not the service's (``service.engines.SERVICE_ENGINE``), and a caller that left it out published
    V0's deadlines and a step the speed learner priced by V0's rules.
    Raises ``InvalidInputError`` when the plan names a trajectory it was not given.
    """
    trajectories = list(trajectories)
    by_key = {t.key: t for t in trajectories}
    pins = pinned_workers(trajectories, prefix_affinity)
    prompts = payloads or {}
    times = {} if inventory is None else _steal_deadlines(plan, trajectories, inventory, engine)

    def items(field: str, keys: Iterable[str]) -> tuple[DeliveryItem, ...]:
        return _items(field, keys, by_key, prompts, times, pins)

    queues, shared = _queues(plan, items, pins)
    return PublishedSchedule(
        schedule_id=schedule_id,
        queues=queues,
        kv_admission=plan.kv_admission,
        lease=lease or LeaseSettings(),
        shared=shared,
        seconds_per_token=seconds_per_token(plan, by_key),
        prefix_affinity=prefix_affinity,
        kv_capacity_tokens=kv_capacities(inventory, queues) if inventory is not None else {},
        predicted_makespan_s=_seconds(plan.predicted_makespan_s),
        planned_finish_s={
            w.worker_id: s for w in plan.workers if (s := _seconds(w.predicted_finish_s)) is not None
        },
        drained=frozenset(drained),
        engine=engine,
    )


def _steal_deadlines(
    plan: Plan, trajectories: list[Trajectory], inventory: Inventory, engine: str
) -> dict[str, PlannedTime]:
    """Each queued item's steal deadline: the plan played at predicted lengths by ``engine``'s rules
    (``scheduler.deadlines``), as the simulator plays its own (``schedule_from_plan``)."""
    rules = engine_rules(engine)
    return planned_times(
        plan,
        trajectories,
        inventory,
        kv_admission=plan.kv_admission,
        watermark=rules.watermark,
        resume_preempted=rules.resume_preempted,
    )


def _items(
    field: str,
    keys: Iterable[str],
    by_key: Mapping[str, Trajectory],
    prompts: Mapping[str, Mapping[str, Any]],
    times: Mapping[str, PlannedTime],
    pins: Mapping[str, str],
) -> tuple[DeliveryItem, ...]:
    """The delivery items of the trajectories ``keys`` names, in that order; ``InvalidInputError`` on
    ``field`` for a key the request did not give."""
    out = []
    for key in keys:
        if key not in by_key:
            raise InvalidInputError(field, key, "plan names a trajectory that was not given")
        traj = by_key[key]
        out.append(delivery_item(traj, prompts.get(traj.prompt_id), times.get(key), key in pins, key))
    return tuple(out)


def _queues(
    plan: Plan, items: Callable[[str, Iterable[str]], tuple[DeliveryItem, ...]], pins: Mapping[str, str]
) -> tuple[dict[str, tuple[DeliveryItem, ...]], tuple[DeliveryItem, ...]]:
    """Each worker's queue and the shared FIFO, as ``items`` builds them from the plan.

    A shared-queue plan's per-worker lists only forecast who runs what; the FIFO is the truth, and
    every worker still gets an (empty) queue so it is announced the schedule and reported on; its
    pinned items go to their workers' own queues (``_pins_to_own_queues``)."""
    shared = items("plan.dispatch_order", plan.dispatch_order)
    queues = {
        w.worker_id: () if shared else items(f"plan.workers[{w.worker_id}]", w.items) for w in plan.workers
    }
    if shared:
        queues, shared = _pins_to_own_queues(queues, shared, pins)
    return queues, shared


def _seconds(value: float) -> float | None:
    """A plan's predicted time as stored beside the schedule; None (not stored) when it is not a
    finite time: what GET /schedule/{id} reports is no reason to refuse a publish."""
    return float(value) if math.isfinite(value) and value >= 0 else None


def pinned_workers(trajectories: Iterable[Trajectory], prefix_affinity: bool) -> dict[str, str]:
    """Trajectory key -> the worker it is bound to. Under prefix affinity a pin on one sample binds
    its whole group (validation's rule, the planner's and the simulator's), so every sample of a
    pinned group is bound to that worker: left in a shared FIFO, the rest of the group would go to
    whichever worker claimed it first, a split group."""
    trajectories = list(trajectories)
    pins = {t.key: t.pinned_worker for t in trajectories if t.pinned_worker is not None}
    if prefix_affinity:
        by_group: dict[str, str] = {}
        for t in trajectories:
            if t.pinned_worker is not None:
                by_group.setdefault(t.group, t.pinned_worker)
        for t in trajectories:
            if t.key not in pins and t.group in by_group:
                pins[t.key] = by_group[t.group]
    return pins


def kv_capacities(inventory: Inventory, queues: Mapping[str, object]) -> dict[str, int]:
    """Each published worker's KV capacity in tokens, as the planner and the simulator derive it
    (``worker_cost``): the claim and steal scripts give no worker an item it cannot hold at its cap."""
    return {
        w.worker_id: worker_cost(w, inventory.model).kv_capacity_tokens
        for w in inventory.workers
        if w.worker_id in queues
    }


def _pins_to_own_queues(
    queues: Mapping[str, tuple[DeliveryItem, ...]],
    shared: tuple[DeliveryItem, ...],
    pins: Mapping[str, str],
) -> tuple[dict[str, tuple[DeliveryItem, ...]], tuple[DeliveryItem, ...]]:
    """A shared-queue plan's pinned items go to their worker's own queue, in dispatch order (as the
    simulator plays them): the FIFO would let any worker take them."""
    own = {w: list(q) for w, q in queues.items()}
    for item in shared:
        worker = pins.get(item.key)
        if item.pinned and worker is not None:
            if worker not in own:
                raise InvalidInputError(
                    "plan.dispatch_order", item.key, f"pinned to {worker}, not in the plan"
                )
            own[worker].append(item)
    return {w: tuple(q) for w, q in own.items()}, tuple(item for item in shared if not item.pinned)


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
    prefix_affinity: bool = False,
    inventory: Inventory | None = None,
    drained: Collection[str] = frozenset(),
    digest: str = "",
    answer: str = "",
    *,
    engine: str,
    mark: str = "",
) -> PublishOutcome:
    """Publish a plan for its workers to pull (atomic, idempotent per ``schedule_id``).

    ``prefix_affinity`` is the request's flag (a ``Plan`` does not record it): steals then keep
    each group on one worker. ``inventory`` (the plan's) gives each item its steal deadline.
    ``drained`` (the request's ``excluded_workers``): workers that take nothing of it.
    ``digest`` and ``answer``: the request's, stored with the schedule (``Delivery.publish``).
    ``mark``: the request's in-flight mark, which must still be there ('' none: ``Delivery.publish``).
    ``engine``: the request's, whose rules play the steal deadlines (required: ``schedule_from_plan``).
    """
    schedule = schedule_from_plan(
        schedule_id, plan, trajectories, payloads, lease, prefix_affinity, inventory, drained, engine=engine
    )
    return delivery.publish(schedule, digest=digest, answer=answer, mark=mark)

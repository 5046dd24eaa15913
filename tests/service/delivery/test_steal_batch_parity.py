"""One steal takes the same batch in ``steal.lua`` as in the simulator (``scheduler.sim_steal``).

The same victim queue is given to both: to the simulator as a ``WorkerEngine``'s unclaimed queue
beside an idle thief, to delivery as a published queue that the thief steals from with what its
sidecar sends (``max``: its free slots, one under KV admission; ``budget_tokens``: its cache less
what it holds at predicted final lengths). Both must take the same items, tail first, in one call:
at most ``max``, at most half the queue (at least one), passing over pinned items and stopping at
the first the KV steal gate refuses. Until 2026-12-07 the simulator took one item a call
(docs/experiments.md, helper steal62). The deadline guard's parity has its own tests
(``test_steal_deadlines.py``): the thief's rate is measured by a sidecar, estimated by the simulator.
"""

from __future__ import annotations

import dataclasses

import pytest

from scheduler.costmodel import WorkerCost
from scheduler.devices import device_profile, model_preset
from scheduler.sim_engine import WorkerEngine
from scheduler.sim_ledger import Ledger
from scheduler.sim_steal import STEAL_MOST, tail_batch
from scheduler.simulator import SimOptions, simulate
from scheduler.stepsum import planned_steps
from scheduler.types import Inventory, Plan, Trajectory, Worker, WorkerPlan
from service.delivery import Delivery, DeliveryItem, PublishedSchedule
from service.delivery.keys import MAX_BATCH

PROMPT, PREDICTED = 100, 400.0  # 500 KV tokens each at the predicted final length


def _item(i: int, pinned: bool) -> DeliveryItem:
    return DeliveryItem(f"b-{i}#0", f"b-{i}", 0, PROMPT, 4096, PREDICTED, pinned=pinned)


def _simulated(n: int, slots: int, pins: set[int], capacity: int, kv_admission: bool) -> list[str]:
    """The keys one simulated steal takes from a victim queue of ``n`` (``pins``: pinned items)."""
    keys = [f"b-{i}#0" for i in range(n)]
    steps = [planned_steps(PREDICTED)] * n
    ledger = Ledger(keys, [PROMPT] * n, steps, steps)
    for i in pins:
        ledger.pin[i] = 0
    cost = WorkerCost("w", 1e-3, 1e-7, 1e-5, 1e-9, 1e-4, 1.0, 1e-6, capacity, slots)
    victim = WorkerEngine(0, cost, ledger, watermark=0.01, kv_admission=kv_admission)
    thief = WorkerEngine(1, cost, ledger, watermark=0.01, kv_admission=kv_admission)
    victim.enqueue(list(range(n)))
    backs, _ = tail_batch(victim, thief, None)
    return [keys[victim.queue[-b]] for b in backs]


@pytest.mark.parametrize(
    ("n", "slots", "pins", "capacity", "kv_admission"),
    [
        (1, 4, set(), 1_000_000, False),
        (7, 10, set(), 1_000_000, False),  # half of seven: three
        (10, 3, set(), 1_000_000, False),  # the thief's three slots
        (400, 150, set(), 1_000_000, False),  # steal_rules' 150-slot thief
        (2_400, 1_200, set(), 1_000_000, False),  # more free slots than one call leases (MAX_BATCH)
        (10, 8, set(), 1_000_000, True),  # KV admission: the sidecar asks for one
        (8, 8, {7, 5}, 1_000_000, False),  # pinned tail items passed, half of all eight taken
        (10, 5, set(), 1_200, False),  # the KV steal gate: two of 500 tokens fit, the third ends it
    ],
)
def test_one_steal_takes_the_same_tail_batch_in_delivery_as_in_the_simulator(
    delivery: Delivery, n: int, slots: int, pins: set[int], capacity: int, kv_admission: bool
) -> None:
    queue = tuple(_item(i, i in pins) for i in range(n))
    delivery.publish(PublishedSchedule("s", {"a": (), "b": queue}))
    want = 1 if kv_admission else slots  # what the sidecar asks for (session.py, _claim_reaching)
    stolen = [le.key for le in delivery.steal("s", "a", want, budget_tokens=capacity)]
    assert stolen == _simulated(n, slots, pins, capacity, kv_admission)
    assert len(stolen) >= 1


def test_the_simulator_s_most_items_a_steal_takes_is_what_one_delivery_call_leases() -> None:
    # scheduler/ imports nothing of service/, so the bound is a constant of its own, held here
    assert STEAL_MOST == MAX_BATCH


def test_a_steal_takes_its_batch_from_the_busiest_queue_alone_in_both(delivery: Delivery) -> None:
    # two slow owners, b with six items left after its claims and c with five; a thief of three slots
    queues = {
        w: tuple(dataclasses.replace(_item(i, False), key=f"{w}-{i}#0") for i in range(k))
        for w, k in (("b", 8), ("c", 7))
    }
    delivery.publish(PublishedSchedule("s", {**queues, "a": ()}))
    delivery.claim("s", "b", 2)
    delivery.claim("s", "c", 2)
    stolen = {le.key for le in delivery.steal("s", "a", 3)}
    trajectories = {
        w: [Trajectory(f"{w}-{i}", 0, PROMPT, 400, PREDICTED) for i in range(len(q))]
        for w, q in queues.items()
    }
    work = [t for q in trajectories.values() for t in q]
    plan = Plan(
        "t",
        tuple(WorkerPlan(w, tuple(t.key for t in q), 0.0) for w, q in {**trajectories, "a": []}.items()),
        0,
        0,
        "T",
        0,
    )
    slow = [Worker(w, device_profile("H100"), max_num_seqs=2, time_scale=10.0) for w in ("b", "c")]
    inventory = Inventory((*slow, Worker("a", device_profile("H100"), max_num_seqs=3)), model_preset("7b"))
    played = simulate(plan, work, {t.key: 400 for t in work}, inventory, SimOptions(steal=True))
    assert stolen == {r.key for r in played.items if r.stolen and r.start_s == 0.0}
    assert stolen == {"b-7#0", "b-6#0", "b-5#0"}

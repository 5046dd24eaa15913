"""One steal takes a batch from one victim, as the delivery layer's does (``scheduler.sim_steal``).

The rule ``steal.lua`` applies to a sidecar's call (``tail_fit``): a thief asking for ``max`` items
(its free slots; one under KV admission) facing a victim queue of ``n`` takes
``min(max, max(1, n // 2))`` from the tail, in one call, from that one victim, passing over pinned
items and stopping at the first the KV steal gate or the deadline guard refuses. Until 2026-12-07
the simulator took one item a call and chose the victim again for each, with no half-queue limit
(docs/experiments.md, helper steal62); the plays at the end tell the two apart.
"""

from __future__ import annotations

import pytest

from scheduler.costmodel import WorkerCost
from scheduler.devices import device_profile, model_preset
from scheduler.sim_engine import WorkerEngine
from scheduler.sim_ledger import Ledger
from scheduler.sim_steal import STEAL_MOST, Steal, steal_count, tail_batch
from scheduler.simulator import SimOptions, SimResult, simulate
from scheduler.types import Inventory, Plan, Trajectory, Worker, WorkerPlan

PROMPT, STEPS = 100, 400  # every item: 500 KV tokens at its predicted (= true) final length


def _cost(slots: int, capacity: int) -> WorkerCost:
    return WorkerCost("w", 1e-3, 1e-7, 1e-5, 1e-9, 1e-4, 1.0, 1e-6, capacity, slots)


def _pair(
    n: int, slots: int, capacity: int = 1_000_000, kv_admission: bool = False
) -> tuple[WorkerEngine, ...]:
    """A victim with ``n`` unclaimed items and an idle thief with ``slots`` free slots."""
    ledger = Ledger([f"i{i}" for i in range(n)], [PROMPT] * n, [STEPS] * n, [STEPS] * n)
    victim = WorkerEngine(0, _cost(4, 1_000_000), ledger, watermark=0.01, kv_admission=kv_admission)
    thief = WorkerEngine(1, _cost(slots, capacity), ledger, watermark=0.01, kv_admission=kv_admission)
    victim.enqueue(list(range(n)))
    return victim, thief


@pytest.mark.parametrize(
    ("n", "slots", "taken"),
    [(1, 4, 1), (2, 1, 1), (3, 8, 1), (7, 10, 3), (10, 3, 3), (10, 5, 5), (400, 150, 150)],
)
def test_a_thief_with_k_free_slots_takes_min_k_and_half_the_queue_from_its_tail(
    n: int, slots: int, taken: int
) -> None:
    victim, thief = _pair(n, slots)
    assert steal_count(thief, n) == taken == min(slots, max(1, n // 2))
    assert tail_batch(victim, thief, None) == (list(range(1, taken + 1)), Steal.TAKEN)


def test_a_thief_with_more_free_slots_than_one_call_leases_takes_that_many() -> None:
    # delivery leases at most MAX_BATCH items a call (Lua's unpack limit): the thief's sidecar asks
    # again for the rest of its room, choosing the victim anew; one call took 1,200 here
    victim, thief = _pair(2 * (STEAL_MOST + 200), STEAL_MOST + 200)
    assert steal_count(thief, len(victim.queue)) == STEAL_MOST
    assert tail_batch(victim, thief, None) == (list(range(1, STEAL_MOST + 1)), Steal.TAKEN)


def test_a_thief_with_no_free_slot_takes_nothing() -> None:
    # as Delivery.steal answers a max below one; the pool asks only a thief with room, but the count
    # of 0 had the walk take every item of the queue, past its half (review63)
    victim, thief = _pair(10, 2)
    for _ in range(2):  # two of the victim's head items fill the thief's two slots
        assert thief.take(victim.queue.popleft())
    assert tail_batch(victim, thief, None) == ([], Steal.STOP)


def test_under_kv_admission_a_steal_takes_one_item_as_the_sidecar_asks_for_one() -> None:
    victim, thief = _pair(10, 8, kv_admission=True)
    assert tail_batch(victim, thief, None) == ([1], Steal.TAKEN)


def test_pinned_tail_items_are_passed_over_and_the_count_still_halves_the_whole_queue() -> None:
    victim, thief = _pair(8, 8)
    thief.ledger.pin[7] = thief.ledger.pin[5] = 0  # two pinned to the victim, at the tail
    assert tail_batch(victim, thief, None) == ([2, 4, 5, 6], Steal.TAKEN)  # half of 8: four items


def test_the_kv_steal_gate_ends_the_batch_at_the_first_item_that_does_not_fit_beside_the_others() -> None:
    victim, thief = _pair(10, 5, capacity=1_200)  # two of 500 tokens fit, a third does not
    assert tail_batch(victim, thief, None) == ([1, 2], Steal.STOP)


def test_the_deadline_guard_ends_the_batch_at_the_first_item_the_owner_would_finish_first() -> None:
    victim, thief = _pair(10, 5)
    ends = [1e9] * 10
    ends[7] = 1e-6  # the third from the tail: its owner finishes it at once
    assert tail_batch(victim, thief, ([0.0] * 10, ends)) == ([1, 2], Steal.STOP)


def _worker(wid: str, slots: int, time_scale: float = 1.0) -> Worker:
    return Worker(wid, device_profile("H100"), max_num_seqs=slots, time_scale=time_scale)


def _items(prefix: str, n: int) -> list[Trajectory]:
    return [Trajectory(f"{prefix}{i}", 0, PROMPT, STEPS, float(STEPS)) for i in range(n)]


def _first_call(queues: dict[str, list[Trajectory]], workers: list[Worker]) -> dict[str, set[str]]:
    """Play a static plan with stealing; each thief's items started at time 0 (its steals then)."""
    work = [t for q in queues.values() for t in q]
    plan = Plan(
        "test", tuple(WorkerPlan(w, tuple(t.key for t in q), 0.0) for w, q in queues.items()), 0, 0, "T", 0
    )
    inventory = Inventory(tuple(workers), model_preset("7b"))
    played: SimResult = simulate(plan, work, {t.key: STEPS for t in work}, inventory, SimOptions(steal=True))
    took: dict[str, set[str]] = {}
    for r in played.items:
        if r.stolen and r.start_s == 0.0:
            took.setdefault(r.worker_id, set()).add(r.key.partition("#")[0])
    return took


def test_a_steal_takes_its_whole_batch_from_the_busiest_victim_not_one_item_from_each_in_turn() -> None:
    # b has six unclaimed items, c five: one call of three takes b's tail three; one item a call
    # took b7, b6 and then c6 (c had become the busier)
    slow = [_worker(w, 2, time_scale=10.0) for w in ("b", "c")]
    queues = {"b": _items("b", 8), "c": _items("c", 7), "a": []}
    assert _first_call(queues, [*slow, _worker("a", 3)]) == {"a": {"b7", "b6", "b5"}}


def test_the_first_thief_takes_half_the_queue_and_the_next_the_half_of_the_rest() -> None:
    # four unclaimed items, two thieves of four slots: the first takes two (half), the second the
    # other two (half of two, then the last); one item a call dealt them alternately
    queues = {"b": _items("b", 6), "a1": [], "a2": []}
    workers = [_worker("b", 2, time_scale=10.0), _worker("a1", 4), _worker("a2", 4)]
    assert _first_call(queues, workers) == {"a1": {"b5", "b4"}, "a2": {"b3", "b2"}}

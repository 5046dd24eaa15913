"""One steal's batch at its bounds, and for a thief that already holds work (``scheduler.sim_steal``).

``test_steal_batch.py`` holds the rule for an idle thief. An item that fills the thief's cache to the
token is taken (the KV steal gate refuses only past the cap, as ``reservation_fits`` and steal.lua's
``used > budget`` do); one too big for the thief's cache is passed over, not a refusal that ends the
call. A thief that steals may still run or hold items of its own: its free slots are
``max_num_seqs`` less what runs AND what waits in its engine (the sidecar's ask,
``service/sidecar/claims.py``); the KV steal gate's budget is its cache less the reservations of
both; and the deadline guard judges each item of the batch with the items taken
before it in the thief's batch, whose steps they slow (mutation testing, helper mutants63).
"""

from __future__ import annotations

from collections import deque

from scheduler.costmodel import WorkerCost
from scheduler.sim_engine import WorkerEngine
from scheduler.sim_guard import thief_seconds
from scheduler.sim_ledger import Ledger
from scheduler.sim_steal import STEAL_SCAN, Steal, steal_count, tail_batch, unpinned_tail
from tests.scheduler.test_steal_batch import _first_call, _items, _worker

N, PROMPT, STEPS = 10, 100, 400  # the victim's items: 500 KV tokens each at the predicted final length
OWN_PROMPT = 3_000  # the thief's own two items: 3,001 KV tokens each, one running and one waiting


def _cost(slots: int, capacity: int, per_seq_s: float = 1e-5) -> WorkerCost:
    return WorkerCost("w", 1e-3, 1e-7, per_seq_s, 1e-9, 1e-4, 1.0, 1e-6, capacity, slots)


def _busy_pair(n: int, slots: int) -> tuple[WorkerEngine, WorkerEngine]:
    """A victim with ``n`` unclaimed items, and a thief of ``slots`` slots and a 10,000-token cache
    that took two big items of its own: the first runs, the second waits (past its admission
    watermark of half the cache), so 3,998 tokens of its cache are not reserved: seven of 500."""
    steps = [STEPS] * n + [1, 1]
    ledger = Ledger([f"i{i}" for i in range(n + 2)], [PROMPT] * n + [OWN_PROMPT] * 2, steps, steps)
    victim = WorkerEngine(0, _cost(4, 1_000_000), ledger, watermark=0.01, kv_admission=False)
    thief = WorkerEngine(1, _cost(slots, 10_000), ledger, watermark=0.5, kv_admission=False)
    victim.enqueue(list(range(n)))
    assert thief.take(n)
    assert thief.take(n + 1)
    assert (thief.batch, len(thief.waiting)) == (1, 1)
    return victim, thief


def test_an_item_waiting_in_the_thief_s_engine_takes_a_slot_from_its_batch() -> None:
    victim, thief = _busy_pair(N, 5)  # five slots: one runs, one waits, three free
    assert steal_count(thief, N) == 3
    assert tail_batch(victim, thief, None) == ([1, 2, 3], Steal.TAKEN)


def test_the_kv_steal_gate_counts_what_waits_in_the_thief_s_engine_beside_what_runs() -> None:
    victim, thief = _busy_pair(30, 20)  # fifteen asked for (half of 30); 3,998 tokens: seven fit
    assert tail_batch(victim, thief, None) == ([1, 2, 3, 4, 5, 6, 7], Steal.STOP)


def test_the_deadline_guard_judges_each_item_with_the_ones_taken_before_it_in_the_batch() -> None:
    # a compute-bound thief: each sequence in its batch adds 10 ms to every step, so its third item
    # of this call runs in a batch of three, three times slower than alone
    ledger = Ledger([f"i{i}" for i in range(N)], [PROMPT] * N, [STEPS] * N, [STEPS] * N)
    victim = WorkerEngine(0, _cost(4, 1_000_000), ledger, watermark=0.01, kv_admission=False)
    thief = WorkerEngine(1, _cost(5, 1_000_000, per_seq_s=1e-2), ledger, watermark=0.01, kv_admission=False)
    victim.enqueue(list(range(N)))
    alone, third = thief_seconds(thief, 7, 1), thief_seconds(thief, 7, 3)
    assert third > 2 * alone
    ends = [1e9] * N
    ends[N - 3] = (alone + third) / 2  # the third from the tail: in time alone, late as the third taken
    assert tail_batch(victim, thief, ([0.0] * N, ends)) == ([1, 2], Steal.STOP)


def _idle_pair(prompts: list[int], slots: int, capacity: int) -> tuple[WorkerEngine, WorkerEngine]:
    steps = [STEPS] * len(prompts)
    ledger = Ledger([f"i{i}" for i in range(len(prompts))], prompts, steps, steps)
    victim = WorkerEngine(0, _cost(4, 1_000_000), ledger, watermark=0.01, kv_admission=False)
    thief = WorkerEngine(1, _cost(slots, capacity), ledger, watermark=0.01, kv_admission=False)
    victim.enqueue(list(range(len(prompts))))
    return victim, thief


def test_items_that_fill_the_thief_s_cache_to_the_token_are_taken() -> None:
    victim, thief = _idle_pair([PROMPT] * N, 5, capacity=1_000)  # two of 500 tokens: exactly full
    assert tail_batch(victim, thief, None) == ([1, 2], Steal.STOP)


def test_a_tail_item_too_big_for_the_thief_s_cache_is_passed_over_not_a_refusal() -> None:
    victim, thief = _idle_pair([PROMPT] * (N - 1) + [2_600], 3, capacity=2_000)  # the tail needs 3,000
    assert not thief.can_hold(N - 1)
    assert tail_batch(victim, thief, None) == ([2, 3, 4], Steal.TAKEN)


def test_a_queue_with_nothing_the_thief_may_ever_take_is_a_skip_so_it_tries_the_next_victim() -> None:
    victim, thief = _idle_pair([PROMPT] * 3 + [2_600] * 3, 4, capacity=2_000)  # three too big for it
    for item in range(3):
        thief.ledger.pin[item] = 0  # the rest pinned to the victim
    assert tail_batch(victim, thief, None) == ([], Steal.SKIP)


def test_a_thief_with_room_after_a_call_steals_again_from_the_queue_with_most_work_left() -> None:
    # six slots: the first call takes b's tail three (half of its six unclaimed); b then holds three,
    # c five, so the next takes two of c's; then b and c hold three each, and b (first in the
    # inventory) gives the last slot one. A victim's work left must shrink by what was stolen from it.
    slow = [_worker(w, 2, time_scale=10.0) for w in ("b", "c")]
    queues = {"b": _items("b", 8), "c": _items("c", 7), "a": []}
    assert _first_call(queues, [*slow, _worker("a", 6)]) == {"a": {"b7", "b6", "b5", "c6", "c5", "b4"}}


def test_under_affinity_a_thief_looks_at_exactly_steal_scan_unpinned_items_it_holds_from_the_tail() -> None:
    # steal.lua's group walk reads positions 1..SCAN of the list it reads: the simulator's bound must
    # be the same number, pins and groups the thief does not hold whole left uncounted
    queue = deque(range(3 * STEAL_SCAN))
    pin = [0 if i % 3 == 0 else -1 for i in queue]  # every third pinned

    def held(item: int) -> bool:
        return item % 3 != 1  # every third (another) in a group too big for the thief

    looked = list(unpinned_tail(queue, pin, held))
    assert len(looked) == STEAL_SCAN
    assert looked[0] == (1, 3 * STEAL_SCAN - 1)
    assert looked[-1] == (3 * STEAL_SCAN - 2, 2)  # the head-most item it may take, the 64th

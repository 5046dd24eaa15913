"""Claims and steals never hand a worker an item its KV cache cannot hold, and a pin binds a whole group
under prefix affinity: the simulator's rules (docs/simulator.md, "Items a worker cannot hold", "What the
request constrains"), so delivery serves what the simulator plays."""

from __future__ import annotations

import dataclasses
import random

import pytest
import redis

from scheduler.devices import device_profile, model_preset
from scheduler.errors import InvalidInputError
from scheduler.planner import plan
from scheduler.sim_rules import DEFAULT_ENGINE  # the rules a plain SimOptions plays by
from scheduler.sim_steal import STEAL_SCAN
from scheduler.simulator import SimOptions, simulate
from scheduler.types import Inventory, PlanRequest, Trajectory, Worker
from service.delivery import (
    Delivery,
    DeliveryItem,
    Lease,
    LeaseSettings,
    PublishedSchedule,
)
from service.delivery.keys import schedule_keys
from service.delivery.publisher import publish_plan
from tests.service.delivery.audit import assert_sound
from tests.service.delivery.conftest import item
from tests.service.finished import RESULT

SMALL = 3_000  # KV tokens of worker "small"; conftest items need 32 + 4096 unless made short


def _short(key: str) -> DeliveryItem:
    """An item that a ``SMALL`` cache holds (32 + 2000 tokens)."""
    return dataclasses.replace(item(key), max_new_tokens=2_000)


def _schedule(
    fifo: tuple[DeliveryItem, ...], affinity: bool = False, **queues: tuple[DeliveryItem, ...]
) -> PublishedSchedule:
    own = {"small": (), "big": (), **queues}
    caps = {"small": SMALL, "big": 100_000}
    return PublishedSchedule("s", own, shared=fifo, prefix_affinity=affinity, kv_capacity_tokens=caps)


def _keys(leases: list[Lease]) -> list[str]:
    return [le.key for le in leases]


def test_a_worker_never_claims_a_fifo_item_its_kv_cache_cannot_hold(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(_schedule((item("x#0"), _short("a#0"), _short("b#0"))))
    assert delivery.claim("s", "small", 3) == []  # the head waits for a worker that holds it
    assert _keys(delivery.claim("s", "big", 1)) == ["x#0"]
    assert _keys(delivery.claim("s", "small", 3)) == ["a#0", "b#0"]
    assert_sound(redis_client, "s")


def test_a_claim_takes_fifo_heads_only_up_to_the_first_it_cannot_hold(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(_schedule((_short("a#0"), item("x#0"), _short("b#0"))))
    assert _keys(delivery.claim("s", "small", 3)) == ["a#0"]  # served in order: b#0 is not skipped to
    assert _keys(delivery.claim("s", "big", 3)) == ["x#0", "b#0"]
    assert_sound(redis_client, "s")


def test_under_affinity_a_worker_claims_a_group_only_if_it_holds_every_sample(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(_schedule((_short("g#0"), item("g#1"), _short("h#0")), affinity=True))
    assert delivery.claim("s", "small", 1) == []  # g#0 fits, but taking it binds g#1, which does not
    assert _keys(delivery.claim("s", "big", 1)) == ["g#0"]
    assert _keys(delivery.claim("s", "small", 5)) == ["h#0"]
    assert _keys(delivery.claim("s", "big", 5)) == ["g#1"]
    assert_sound(redis_client, "s")


def test_a_thief_passes_over_a_tail_item_its_kv_cache_cannot_hold_for_the_items_before_it(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    # a long prompt at the tail used to end the steal: the small worker got nothing from this queue
    victim = (_short("a#0"), _short("b#0"), item("x#0"), _short("c#0"), item("y#0"))
    delivery.publish(_schedule((), big=victim))
    assert _keys(delivery.steal("s", "small", 2)) == ["c#0", "b#0"]  # x#0 and y#0 are too big for it
    assert _keys(delivery.claim("s", "big", 9)) == ["a#0", "x#0", "y#0"]  # they stay, in place
    assert_sound(redis_client, "s")


def test_under_affinity_a_thief_passes_over_a_group_with_a_sample_it_cannot_hold(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    victim = (_short("a#0"), _short("a#1"), _short("g#0"), item("g#1"))
    delivery.publish(_schedule((), affinity=True, big=victim))
    assert _keys(delivery.steal("s", "small", 4)) == ["a#0", "a#1"]  # was none: g#1 shielded a
    assert _keys(delivery.claim("s", "big", 9)) == ["g#0", "g#1"]
    assert_sound(redis_client, "s")


def test_a_steal_passes_any_number_of_items_too_big_for_the_thief_at_a_cost_that_does_not_grow_with_them(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    # long documents with short answers sort to the tail of a longest-first queue: 64 or more of them
    # there kept a small-cache thief from every item before them (steal.lua read SCAN items)
    for bigs in (STEAL_SCAN, 2_000):
        victim = (_short("a#0"), _short("a#1"), *(item(f"x{i}#0") for i in range(bigs)))
        delivery.publish(dataclasses.replace(_schedule((), big=victim), schedule_id=f"s{bigs}"))
        before = _commands(redis_client)
        assert _keys(delivery.steal(f"s{bigs}", "small", 4)) == ["a#1", "a#0"]
        assert _commands(redis_client) - before < 60  # the same at 64 and at 2,000
        assert_sound(redis_client, f"s{bigs}")


def test_a_queue_keeps_its_list_of_what_a_small_cache_holds_through_claims_requeues_and_steals(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    victim = (
        item("x0#0"),
        _short("a#0"),
        item("x1#0"),
        _short("a#1"),
        *(item(f"x{i}#0") for i in range(2, 80)),
    )
    delivery.publish(_schedule((), big=victim, other=(_short("o#0"),)))
    held = delivery.claim("s", "big", 2)  # x0 and a#0 leave the head of the queue and of its list
    assert_sound(redis_client, "s")
    delivery.fail(held[1], "engine error")  # a#0 goes to the head of the least loaded live queue
    delivery.release(held[:1])  # x0 back to the head of big's queue, not into the small list
    assert_sound(redis_client, "s")
    assert _keys(delivery.steal("s", "small", 1)) == ["a#1"]
    assert_sound(redis_client, "s")


def test_under_affinity_a_steal_passes_any_number_of_groups_too_big_for_the_thief_in_as_many_commands(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    # a group walk read the queue itself, SCAN items from its tail: 64 items of groups with a member
    # too big for the thief kept it from every group before them, as pins did before their index
    for bigs in (STEAL_SCAN, 2_000):
        groups = [(_short(f"x{i}#0"), item(f"x{i}#1")) for i in range(bigs // 2)]  # x{i}#1: too big
        victim = (_short("a#0"), _short("a#1"), *(member for group in groups for member in group))
        schedule = dataclasses.replace(_schedule((), affinity=True, big=victim), schedule_id=f"s{bigs}")
        delivery.publish(schedule)
        before = _commands(redis_client)
        assert _keys(delivery.steal(f"s{bigs}", "small", 4)) == ["a#0", "a#1"]
        assert _commands(redis_client) - before < 60  # the same at 64 and at 2,000
        assert_sound(redis_client, f"s{bigs}")


def test_under_affinity_the_list_of_what_a_small_cache_holds_leaves_out_a_whole_group_for_one_member(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """Whole groups in or out, kept so through claims, requeues and steals (``assert_sound``)."""
    victim = (_short("a#0"), _short("a#1"), _short("g#0"), item("g#1"), _short("b#0"), _short("b#1"))
    delivery.publish(_schedule((), affinity=True, big=victim, other=(_short("o#0"),)))
    held = delivery.claim("s", "big", 2)  # a#0, a#1 leave the head of the queue and of its list
    assert_sound(redis_client, "s")
    delivery.release(held)  # back to the head, into the list again
    assert_sound(redis_client, "s")
    assert redis_client.lrange(f"{schedule_keys('s').base}:h:{SMALL}:big", 0, -1) == [
        "a#0",
        "a#1",
        "b#0",
        "b#1",
    ]
    assert _keys(delivery.steal("s", "small", 4)) == ["b#0", "b#1"]
    assert_sound(redis_client, "s")


def _commands(client: redis.Redis) -> int:
    """Commands the server has run so far (scripts' calls included), from INFO commandstats."""
    return sum(int(stat["calls"]) for stat in client.info("commandstats").values())


def test_without_known_capacities_claims_are_not_limited(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(dataclasses.replace(_schedule((item("x#0"),)), kv_capacity_tokens={}))
    assert _keys(delivery.claim("s", "small", 1)) == ["x#0"]
    assert redis_client.exists(schedule_keys("s").need) == 0  # nothing stored, nothing checked


def test_a_capacity_that_names_no_queued_worker_or_is_not_a_positive_integer_is_refused(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    for caps, field in (({"ghost": 10}, "kv_capacity_tokens"), ({"small": 0}, "kv_capacity_tokens[small]")):
        with pytest.raises(InvalidInputError) as caught:
            delivery.publish(dataclasses.replace(_schedule(()), kv_capacity_tokens=caps))
        assert caught.value.field == field
    assert redis_client.exists(schedule_keys("s").meta) == 0  # nothing written


def _batch(seed: int) -> tuple[list[Trajectory], dict[str, int], Inventory]:
    """Twelve prompts of four samples in sample-major order on three one-slot workers, the first with a
    small KV cache: samples 1 and 3 of every odd prompt are too long for it, and p0#0 is pinned to it
    (under affinity that binds the whole group p0)."""
    rng = random.Random(seed)
    trajs = []
    for s in range(4):
        for p in range(12):
            cap = 8_000 if p % 2 == 1 and s in (1, 3) else 2_000
            pin = "w0" if (p, s) == (0, 0) else None
            trajs.append(Trajectory(f"p{p}", s, 64, cap, 800.0, pinned_worker=pin))
    actual = {t.key: rng.randint(100, t.max_new_tokens) for t in trajs}
    h100 = device_profile("H100")
    small = Worker("w0", h100, max_num_seqs=1, kv_capacity_tokens=SMALL)
    workers = (small, Worker("w1", h100, max_num_seqs=1), Worker("w2", h100, max_num_seqs=1))
    return trajs, actual, Inventory(workers, model_preset("7b"))


def _replay(
    delivery: Delivery, sid: str, events: dict[tuple[str, int], str | None]
) -> dict[tuple[str, int], str | None]:
    """At each simulated completion or start (worker, ms), complete the worker's previous item and claim
    one. Claims of one instant that find nothing retry after the others: the simulator sets a worker
    that cannot hold the head aside until another takes it. Returns what delivery handed each."""
    held: dict[str, Lease] = {}
    got: dict[tuple[str, int], str | None] = {}
    for at in sorted({ms for _, ms in events}):
        pending = [w for w, ms in sorted(events) if ms == at]
        while pending:
            left = []
            for worker in pending:
                lease = held.pop(worker, None)
                done = [(lease.key, lease.token, RESULT)] if lease else []
                _, leases = delivery.complete_and_claim(sid, worker, done, 1, now_ms=at)
                got[(worker, at)] = leases[0].key if leases else None
                if leases:
                    held[worker] = leases[0]
                else:
                    left.append(worker)
            if len(left) == len(pending):
                break
            pending = left
    return got


def test_delivery_hands_out_a_shared_queue_plan_on_unequal_caches_as_the_simulator_plays_it(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    for affinity in (True, False):
        trajs, actual, inventory = _batch(seed=3)
        shared_plan = plan(PlanRequest(tuple(trajs), inventory, prefix_affinity=affinity), "least_loaded")
        sim = simulate(shared_plan, trajs, actual, inventory, SimOptions(prefix_affinity=affinity))
        # at each simulated completion and start, the item the worker took there (None: nothing)
        events: dict[tuple[str, int], str | None] = {(r.worker_id, _ms(r.end_s)): None for r in sim.items}
        events.update({(r.worker_id, _ms(r.start_s)): r.key for r in sim.items})
        sid = f"caches-{affinity}"
        lease = LeaseSettings(lease_ttl_ms=10**9)  # no heartbeats in a replay: no lease may lapse
        publish_plan(
            delivery, sid, shared_plan, trajs, None, lease, affinity, inventory, engine=DEFAULT_ENGINE
        )
        assert _replay(delivery, sid, events) == events
        by_key = {r.key: r.worker_id for r in sim.items}
        assert all(by_key[t.key] != "w0" for t in trajs if t.max_new_tokens > SMALL)
        assert by_key["p0#0"] == "w0"
        if affinity:
            assert {by_key[t.key] for t in trajs if t.group == "p0"} == {"w0"}
        assert_sound(redis_client, sid)


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def _sized(key: str, need: int, predicted: float) -> DeliveryItem:
    """An item whose cap needs ``need`` KV tokens (100 of prompt, the rest ``max_new_tokens``)."""
    return dataclasses.replace(item(key, predicted), prompt_tokens=100, max_new_tokens=need - 100)


def _dead_big_workers(extra: int = 0) -> PublishedSchedule:
    """Two dead big workers, the busiest holding only items too big for the small one, and ``extra``
    more big queues of such items, each busier than the queue the small worker could drain."""
    queues = {
        "xbig-0": tuple(_sized(f"a{i}#0", 20_100, 5_000.0) for i in range(2)),
        "xbig-1": tuple(_sized(f"b{i}#0", 1_100, 500.0) for i in range(4)),
        "xsmall-0": (),
    }
    for n in range(extra):
        queues[f"xbig-{n + 2}"] = tuple(_sized(f"c{n}-{i}#0", 20_100, 5_000.0) for i in range(2))
    caps = {w: 16_000 if w == "xsmall-0" else 1_000_000 for w in queues}
    return PublishedSchedule("s", queues, kv_capacity_tokens=caps)


def test_a_thief_steals_from_the_next_busiest_queue_when_it_cannot_hold_the_busiest_ones_tail(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(_dead_big_workers())
    assert _keys(delivery.steal("s", "xsmall-0", 4)) == ["b3#0", "b2#0"]  # half of xbig-1, from its tail
    assert delivery.progress("s").workers["xbig-0"].queued == 2
    assert_sound(redis_client, "s")


def test_a_steal_looks_at_no_more_than_four_queues(delivery: Delivery, redis_client: redis.Redis) -> None:
    delivery.publish(_dead_big_workers(extra=3))  # four queues of items too big, then xbig-1
    assert delivery.steal("s", "xsmall-0", 4) == []
    assert_sound(redis_client, "s")


def test_a_thief_refused_by_the_kv_steal_gate_on_the_busiest_queue_waits_for_its_own_work_to_end(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    queues = {"a": (), "b": (item("b0#0", 900.0), item("b1#0", 900.0)), "c": (_short("c0#0"), _short("c1#0"))}
    delivery.publish(PublishedSchedule("s", queues, kv_capacity_tokens={"a": 100_000}))
    # b's tail reserves 32 + 900 tokens; c's 32 + 100 would fit, but the budget changes only as a's
    # held work ends, and then b's tail fits too: the turn ends rather than taking from elsewhere
    assert delivery.steal("s", "a", 4, budget_tokens=500) == []
    assert _keys(delivery.steal("s", "a", 4, budget_tokens=2_000)) == ["b1#0"]
    assert_sound(redis_client, "s")

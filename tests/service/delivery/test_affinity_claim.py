"""Claims from the shared FIFO honour prefix affinity as the simulator does (scheduler/sim_pool.py).

The rule: under prefix affinity, the worker that claims a group's first sample from the shared FIFO
takes the rest of that group (what is still in the FIFO, in FIFO order) into its own queue, in the
same atomic script, so no other worker can take one of them and the group shares one engine's
prefix cache. The last test replays a shared-queue plan claim by claim in the simulator's order and
checks that delivery hands each worker exactly the item the simulator's worker started.
"""

from __future__ import annotations

import dataclasses
import random
from collections import defaultdict
from functools import partial

import pytest
import redis

from scheduler.devices import device_profile, model_preset
from scheduler.errors import InvalidInputError
from scheduler.planner import plan
from scheduler.sim_rules import DEFAULT_ENGINE  # the rules a plain SimOptions plays by
from scheduler.simulator import SimOptions, simulate
from scheduler.types import Inventory, PlanRequest, Trajectory, Worker
from service.delivery import Delivery, DeliveryItem, Lease, PublishedSchedule
from service.delivery.keys import schedule_keys
from service.delivery.publisher import publish_plan
from tests.service.delivery.audit import assert_sound
from tests.service.delivery.concurrency import run_together
from tests.service.delivery.conftest import item
from tests.service.finished import RESULT


def _shared(
    fifo: tuple[DeliveryItem, ...], affinity: bool = True, **queues: tuple[DeliveryItem, ...]
) -> PublishedSchedule:
    """Workers a, b (and any named) with own ``queues`` (empty by default) and one shared FIFO."""
    own = {"a": (), "b": (), **queues}
    return PublishedSchedule("s", own, shared=fifo, prefix_affinity=affinity)


def _keys(leases: list[Lease]) -> list[str]:
    return [le.key for le in leases]


def _fifo(*keys: str) -> tuple[DeliveryItem, ...]:
    return tuple(item(k) for k in keys)


def test_claiming_a_groups_first_sample_from_the_shared_queue_takes_its_whole_group(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(_shared(_fifo("p#0", "p#1", "p#2", "q#0", "q#1")))
    assert _keys(delivery.claim("s", "a", 2)) == ["p#0", "p#1"]  # up to its slots now...
    progress = delivery.progress("s")
    assert (progress.workers["a"].queued, progress.workers["*"].queued) == (1, 2)  # ...p#2 waits on a
    assert _keys(delivery.claim("s", "b", 5)) == ["q#0", "q#1"]  # b never sees p#2
    assert _keys(delivery.claim("s", "a", 5)) == ["p#2"]
    assert_sound(redis_client, "s")


def test_the_rest_of_a_group_leaves_the_fifo_in_fifo_order_from_wherever_it_sits(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(_shared(_fifo("p#0", "q#0", "p#1", "q#1", "p#2")))
    assert _keys(delivery.claim("s", "a", 1)) == ["p#0"]
    assert _keys(delivery.claim("s", "b", 5)) == ["q#0", "q#1"]
    assert _keys(delivery.claim("s", "a", 5)) == ["p#1", "p#2"]
    assert_sound(redis_client, "s")


def test_a_claim_with_room_after_a_whole_group_goes_on_to_the_next_group(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(_shared(_fifo("p#0", "p#1", "q#0", "q#1", "r#0")))
    assert _keys(delivery.claim("s", "a", 3)) == ["p#0", "p#1", "q#0"]  # q#1 follows q#0 onto a
    assert _keys(delivery.claim("s", "b", 5)) == ["r#0"]
    assert _keys(delivery.claim("s", "a", 5)) == ["q#1"]
    assert_sound(redis_client, "s")


def test_while_part_of_a_group_waits_on_the_own_queue_the_claim_stops_there(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(_shared(_fifo("p#0", "p#1", "p#2", "q#0")))
    assert _keys(delivery.claim("s", "a", 2)) == ["p#0", "p#1"]  # not q#0: p#2 runs on a first
    assert _keys(delivery.claim("s", "a", 2)) == ["p#2", "q#0"]
    assert_sound(redis_client, "s")


def test_without_affinity_a_shared_claim_takes_one_item(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(_shared(_fifo("p#0", "p#1", "p#2"), affinity=False))
    assert _keys(delivery.claim("s", "a", 1)) == ["p#0"]
    assert _keys(delivery.claim("s", "b", 1)) == ["p#1"]  # the group is split, as the simulator would
    assert delivery.progress("s").workers["a"].queued == 0
    assert_sound(redis_client, "s")


def test_under_affinity_a_schedule_with_a_pinned_groups_sample_in_the_fifo_is_refused(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    pinned = dataclasses.replace(item("p#0"), pinned=True)  # a pin binds the whole group to c
    with pytest.raises(InvalidInputError) as caught:
        delivery.publish(_shared(_fifo("p#1", "p#2", "q#0"), c=(pinned,)))
    assert (caught.value.field, caught.value.value) == ("shared[p#1].group_id", "p")
    assert redis_client.exists(schedule_keys("s").meta) == 0  # nothing written
    delivery.publish(_shared(_fifo("p#1", "p#2", "q#0"), affinity=False, c=(pinned,)))  # no affinity: fine


def test_the_rest_of_a_claimed_group_is_never_stolen_from_its_claimer(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(_shared(_fifo("p#0", "p#1", "p#2")))
    delivery.claim("s", "a", 1)
    assert delivery.steal("s", "b", 4) == []  # p#0 runs on a: the group is started, so it stays
    assert delivery.progress("s").workers["a"].queued == 2
    assert_sound(redis_client, "s")


def test_a_reaped_sample_of_a_claimed_group_returns_to_its_claimer_not_the_fifo(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(_shared(_fifo("p#0", "p#1", "q#0")), now_ms=0)
    delivery.claim("s", "a", 2, now_ms=0)
    delivery.reap("s", now_ms=60_000)  # a died: both leases lapse
    assert _keys(delivery.claim("s", "b", 5, now_ms=60_000)) == ["q#0"]
    assert sorted(_keys(delivery.claim("s", "a", 5, now_ms=60_000))) == ["p#0", "p#1"]
    assert_sound(redis_client, "s")


def test_under_affinity_the_fifo_is_laid_out_group_by_group_in_order_of_first_samples(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    fifo = _fifo("p#0", "q#0", "p#1", "r#0", "q#1")
    delivery.publish(_shared(fifo))
    delivery.publish(dataclasses.replace(_shared(fifo, affinity=False), schedule_id="t"))
    grouped = ["p#0", "p#1", "q#0", "q#1", "r#0"]  # what the claims serve, one bind after another
    assert redis_client.lrange(schedule_keys("s").queue("*"), 0, -1) == grouped
    assert redis_client.lrange(schedule_keys("t").queue("*"), 0, -1) == [it.key for it in fifo]


def test_a_second_worker_never_gets_a_sample_of_a_claimed_group(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    groups = [f"g{g}" for g in range(60)]
    rng = random.Random(7)
    fifo = tuple(item(f"{g}#{i}") for i in range(4) for g in rng.sample(groups, len(groups)))
    workers = [f"w{i}" for i in range(8)]
    delivery.publish(PublishedSchedule("s", dict.fromkeys(workers, ()), shared=fifo, prefix_affinity=True))
    ran: dict[str, set[str]] = defaultdict(set)  # group -> workers that leased one of its samples

    def work(worker: str) -> None:
        while got := delivery.claim("s", worker, 1 + len(worker) % 3) or delivery.steal("s", worker, 2):
            for lease in got:
                ran[lease.item.group].add(worker)
            delivery.complete_many("s", [(le.key, le.token, RESULT) for le in got])

    run_together([partial(work, w) for w in workers])
    assert sorted(ran) == sorted(groups)
    assert [g for g, who in ran.items() if len(who) != 1] == []
    assert len({next(iter(who)) for who in ran.values()}) > 1  # the workers really shared the FIFO
    assert delivery.progress("s").done == len(fifo)
    assert_sound(redis_client, "s")


def _batch(seed: int) -> tuple[list[Trajectory], dict[str, int], Inventory]:
    """Twelve prompts of four samples, in sample-major input order (so the FIFO interleaves groups),
    with random true lengths, on three one-slot workers (one claim per start, as in the simulator)."""
    rng = random.Random(seed)
    trajs = [Trajectory(f"p{p}", s, 64, 4_096, 800.0) for s in range(4) for p in range(12)]
    actual = {t.key: rng.randint(100, 3_000) for t in trajs}
    workers = tuple(Worker(f"w{i}", device_profile("H100"), max_num_seqs=1) for i in range(3))
    return trajs, actual, Inventory(workers, model_preset("7b"))


def _replay_in_delivery(delivery: Delivery, sid: str, order: list[tuple[str, str, int]]) -> list[str]:
    """Claim one item per simulated start (worker, key, ms), completing the worker's previous one first."""
    held: dict[str, Lease] = {}
    got: list[str] = []
    for worker, _, at_ms in order:
        done = [(held[worker].key, held[worker].token, RESULT)] if worker in held else []
        _, leases = delivery.complete_and_claim(sid, worker, done, 1, now_ms=at_ms)
        held[worker] = leases[0]
        got.append(leases[0].key)
    return got


def test_delivery_hands_out_a_shared_queue_plan_as_the_simulator_plays_it(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    for affinity in (True, False):
        trajs, actual, inventory = _batch(seed=3)
        request = PlanRequest(tuple(trajs), inventory, prefix_affinity=affinity)
        shared_plan = plan(request, "least_loaded")
        sim = simulate(shared_plan, trajs, actual, inventory, SimOptions(prefix_affinity=affinity))
        index = {w.worker_id: i for i, w in enumerate(inventory.workers)}
        starts = sorted(sim.items, key=lambda r: (r.start_s, index[r.worker_id]))
        order = [(r.worker_id, r.key, round(r.start_s * 1000)) for r in starts]
        sid = f"affinity-{affinity}"
        publish_plan(delivery, sid, shared_plan, trajs, prefix_affinity=affinity, engine=DEFAULT_ENGINE)
        delivery_keys = _replay_in_delivery(delivery, sid, order)
        assert delivery_keys == [key for _, key, _ in order]
        workers_of: dict[str, set[str]] = defaultdict(set)
        for worker, key, _ in order:
            workers_of[key.split("#")[0]].add(worker)
        split = [g for g, who in workers_of.items() if len(who) > 1]
        assert (split == []) if affinity else (split != [])  # the rule is what keeps groups whole
        assert_sound(redis_client, sid)

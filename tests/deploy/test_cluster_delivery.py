"""The delivery protocol on a real 3-master Redis Cluster: same behaviour, nothing lost, nothing twice.

A single server forgives a script that touches keys of two hash slots; a cluster refuses it (or worse,
the keys live on different nodes). So the protocol's whole behaviour suite (tests/service/delivery) is
re-run here with its fixtures pointed at the cluster, and then many schedules, spread over all three
masters, are driven concurrently by workers that claim, steal, complete, and die mid-trajectory, with
reapers running, and audited from the raw keys: lost = 0 and accepted twice = 0.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any, cast

import pytest
import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot

from service.delivery import CompletionOutcome, Delivery
from service.delivery.keys import sidecar_presence
from service.delivery.reaper import reap_all
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from service.sidecar.takeover import Takeover, TakeoverReport
from tests.cluster import LocalCluster
from tests.service.delivery import (
    test_affinity_claim,
    test_affinity_stranded,
    test_cancel,
    test_drained,
    test_faults,
    test_lapse_index,
    test_plan_times,
    test_protocol,
    test_publish_layout,
    test_publish_mark,
    test_reset,
    test_retry_elsewhere,
    test_schedule_lifetime,
    test_state_machine,
    test_steal_choice,
    test_steal_rules,
)
from tests.service.delivery.audit import audit
from tests.service.delivery.conftest import schedule
from tests.service.finished import RESULT
from tests.service.sidecar.procs import claimed_by_a_killed_sidecar

# The single-node behaviour suite, collected again in this module with the cluster fixtures below: every
# operation, the hypothesis state machine, progress on the lease clock, the reapers' lapse index (its
# clock read in a cross-slot pipeline), and the faults that need no
# second connection by URL.
globals().update({name: fn for name, fn in vars(test_protocol).items() if name.startswith("test_")})
globals().update({name: fn for name, fn in vars(test_steal_choice).items() if name.startswith("test_")})
globals().update({name: fn for name, fn in vars(test_schedule_lifetime).items() if name.startswith("test_")})
globals().update({name: fn for name, fn in vars(test_state_machine).items() if name.startswith("test_")})
globals().update({name: fn for name, fn in vars(test_steal_rules).items() if name.startswith("test_")})
globals().update({name: fn for name, fn in vars(test_affinity_claim).items() if name.startswith("test_")})
globals().update({name: fn for name, fn in vars(test_affinity_stranded).items() if name.startswith("test_")})
globals().update({name: fn for name, fn in vars(test_cancel).items() if name.startswith("test_")})
globals().update({name: fn for name, fn in vars(test_plan_times).items() if name.startswith("test_")})
globals().update({name: fn for name, fn in vars(test_publish_layout).items() if name.startswith("test_")})
globals().update({name: fn for name, fn in vars(test_publish_mark).items() if name.startswith("test_")})
globals().update({name: fn for name, fn in vars(test_lapse_index).items() if name.startswith("test_")})
globals().update({name: fn for name, fn in vars(test_retry_elsewhere).items() if name.startswith("test_")})
globals().update({name: fn for name, fn in vars(test_drained).items() if name.startswith("test_")})
globals().update({name: fn for name, fn in vars(test_reset).items() if name.startswith("test_")})
globals().update(
    {
        name: getattr(test_faults, name)
        for name in (
            "test_a_crash_after_generating_but_before_completing_is_redelivered_and_done_once",
            "test_a_poison_item_is_dead_lettered_after_max_attempts",
        )
    }
)


@pytest.fixture(scope="module")
def _one_client(redis_cluster: LocalCluster) -> Iterator[RedisCluster]:
    """The module's one cluster client: no test here moves a slot or closes its client."""
    client = redis_cluster.client()
    yield client
    client.close()


@pytest.fixture
def cluster_client(redis_cluster: LocalCluster, _one_client: RedisCluster) -> Iterator[RedisCluster]:
    """The module's cluster client on emptied masters, so each test starts from nothing, as with a
    client of its own (``tests.cluster``'s): a new one asks a node for its command table first, ~20 ms
    of CPU, 166 times in this module."""
    redis_cluster.flushall()
    yield _one_client
    redis_cluster.flushall()


@pytest.fixture
def redis_client(cluster_client: RedisCluster) -> RedisCluster:
    """The behaviour suite's raw client, here the cluster client (keys/dbsize span every master)."""
    return cluster_client


@pytest.fixture
def delivery(cluster_client: RedisCluster) -> Delivery:
    """The protocol on the emptied cluster."""
    return Delivery(cluster_client)


def _node_of(cluster: LocalCluster, key: str) -> int:
    """The port of the master that holds ``key``'s slot, asked of the cluster itself."""
    with redis.Redis(port=cluster.nodes[0].port, decode_responses=True) as client:
        for start, end, master, *_ in client.execute_command("CLUSTER", "SLOTS"):
            if int(start) <= key_slot(key.encode()) <= int(end):
                return int(master[1])
    raise AssertionError(f"no master owns {key}")


def _schedule_ids_on_every_master(cluster: LocalCluster, per_master: int) -> list[str]:
    """Schedule ids whose hash slots fall on each master ``per_master`` times."""
    found: dict[int, list[str]] = {node.port: [] for node in cluster.nodes}
    n = 0
    while any(len(ids) < per_master for ids in found.values()):
        sid = f"step-{n}"
        owner = found[_node_of(cluster, f"{{{sid}}}")]
        if len(owner) < per_master:
            owner.append(sid)
        n += 1
    return [sid for ids in found.values() for sid in ids]


def test_every_key_of_a_schedule_lands_on_the_one_master_that_owns_its_slot(
    redis_cluster: LocalCluster, delivery: Delivery
) -> None:
    for sid in _schedule_ids_on_every_master(redis_cluster, 1):
        delivery.publish(schedule(sid, {"a": 3, "b": 3}, ttl_ms=50, max_attempts=2))
        (lease,) = delivery.claim(sid, "a", 1)
        delivery.complete(lease, RESULT)
        delivery.claim(sid, "b", 3)
        delivery.steal(sid, "b", 1)
        delivery.heartbeat(delivery.claim(sid, "a", 1))
        delivery.reap(sid)
        owner = _node_of(redis_cluster, f"{{{sid}}}")
        for node in redis_cluster.nodes:
            with redis.Redis(port=node.port, decode_responses=True) as client:
                names = list(client.scan_iter(match=f"rs:{{{sid}}}:*"))
            assert bool(names) == (node.port == owner), (sid, node.port, names)


def test_a_restarted_sidecar_hands_back_its_leases_in_schedules_on_every_master(
    redis_cluster: LocalCluster, delivery: Delivery, cluster_client: RedisCluster
) -> None:
    """The takeover's reads and writes on Redis Cluster: the active index, one reset per schedule (on
    the master of that schedule's slot), the presence key in its worker's slot."""
    sids = _schedule_ids_on_every_master(redis_cluster, 1)
    for sid in sids:
        delivery.publish(schedule(sid, {"w0": 2, "w1": 1}, ttl_ms=60_000))
        claimed_by_a_killed_sidecar(delivery, sid, "w0", 2)
        delivery.claim(sid, "w1", 1)  # a live sidecar's
    cluster_client.set(sidecar_presence("w0"), "killed-instance", px=200)  # its predecessor's, lapsing
    takeover = Takeover(WorkerSession(delivery, Holdings(8), SessionSettings("w0")))

    async def start() -> None:
        marking = asyncio.create_task(takeover.run(asyncio.Event()))
        await asyncio.wait_for(takeover.done.wait(), 10)
        await asyncio.sleep(0.1)  # its first presence write
        marking.cancel()
        await takeover.leave(2.0)

    asyncio.run(start())
    assert takeover.report == TakeoverReport(released=2 * len(sids))
    for sid in sids:
        workers = delivery.progress(sid).workers
        assert (workers["w0"].queued, workers["w0"].running, workers["w1"].running) == (2, 0, 1)
    assert cluster_client.exists(sidecar_presence("w0")) == 0  # left gracefully


class _Worker(threading.Thread):
    """A simulated sidecar: claims, completes, steals; a 'crashing' one dies holding its leases."""

    def __init__(self, delivery: Delivery, sid: str, worker_id: str, crash_after: int | None) -> None:
        super().__init__(name=f"{sid}/{worker_id}", daemon=True)
        self.delivery, self.sid, self.worker_id, self.crash_after = delivery, sid, worker_id, crash_after
        self.accepted: list[tuple[str, str]] = []  # (schedule, key) completions this worker saw ACCEPTED
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # surfaced by the test, never swallowed
            self.error = exc

    def _loop(self) -> None:
        rng = random.Random(self.name)
        while not self.delivery.progress(self.sid).finished:
            leases = self.delivery.claim(self.sid, self.worker_id, 4) or self.delivery.steal(
                self.sid, self.worker_id, 2
            )
            if self.crash_after is not None and len(self.accepted) >= self.crash_after and leases:
                return  # dies holding its leases: only the reaper can bring them back
            for lease in leases:
                if self.delivery.complete(lease, RESULT) is CompletionOutcome.ACCEPTED:
                    self.accepted.append((self.sid, lease.key))
                if rng.random() < 0.2:  # a retried completion after a lost reply: must be a duplicate
                    assert self.delivery.complete(lease, RESULT) is not CompletionOutcome.ACCEPTED
            if not leases:
                threading.Event().wait(0.01)


def _reap_until(delivery: Delivery, stop: threading.Event, requeued: list[int]) -> None:
    """A service replica's reaper loop; counts the leases it brought back."""
    while not stop.is_set():
        requeued.append(sum(r.requeued for r in reap_all(delivery).values()))
        stop.wait(0.02)


@pytest.mark.slow
def test_concurrent_workers_on_many_schedules_lose_nothing_and_accept_nothing_twice(
    redis_cluster: LocalCluster, cluster_client: RedisCluster
) -> None:
    delivery = Delivery(cluster_client)
    sids = _schedule_ids_on_every_master(redis_cluster, 2)
    workers = {"h100-0": 40, "h100-1": 40, "ascend-0": 20, "ascend-1": 20}
    for sid in sids:
        delivery.publish(schedule(sid, workers, ttl_ms=300, max_attempts=10))
    threads = [
        _Worker(Delivery(redis_cluster.client()), sid, w, crash_after=5 if w == "ascend-1" else None)
        for sid in sids
        for w in workers
    ]
    stop, requeued = threading.Event(), list[int]()
    reapers = [  # two service replicas reaping the same schedules at once
        threading.Thread(target=_reap_until, args=(Delivery(redis_cluster.client()), stop, requeued))
        for _ in range(2)
    ]
    for thread in [*threads, *reapers]:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    stop.set()
    for thread in reapers:
        thread.join()
    assert [t.error for t in threads if t.error] == []
    accepted = Counter(done for t in threads for done in t.accepted)
    reports = {sid: audit(cast(Any, cluster_client), sid) for sid in sids}
    lost = sum(r.lost for r in reports.values())
    twice = sum(r.accepted_twice for r in reports.values())
    total = sum(r.total for r in reports.values())
    print(
        f"\ncluster delivery: schedules={len(sids)} items={total} reaped={sum(requeued)} "
        f"lost={lost} duplicated={twice}"
    )
    assert sum(requeued) > 0, "the crashed workers' leases came back through the reapers"
    assert (lost, twice) == (0, 0)
    assert all(r.problems == [] and r.counts_agree for r in reports.values())
    assert sum(r.done for r in reports.values()) == total == len(sids) * sum(workers.values())
    assert len(accepted) == total, "every item acknowledged as accepted"
    assert max(accepted.values()) == 1, "no item acknowledged as accepted twice"

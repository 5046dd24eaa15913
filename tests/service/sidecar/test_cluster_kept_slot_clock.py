"""A kept push completion whose schedule's slot no master serves, while the slots of the session's
other leases answer (a real Redis Cluster, ``cluster-require-full-coverage no``, ``CLUSTER DELSLOTS``).

The give-up clock of a kept report ran per session: the heartbeat of the other schedule's lease went
through, so the result aged as if Redis answered for its schedule, and two TTLs and two reaper passes
later it was given up ``lost``, though the reaper could no more reach its schedule than its resend
could, and it would have landed once the slot was served (``answering.py``). Now only an answer for
its own slot runs its clock.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from redis.exceptions import ClusterDownError, RedisClusterException

from service.delivery import Delivery
from service.delivery.reaper import DEFAULT_INTERVAL_S, reap_all
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.cluster import LocalCluster, partly_served, serve, slot_of, unserve
from tests.service.finished import RESULT
from tests.service.sidecar.procs import item, publish

pytestmark = pytest.mark.slow
TTL_S = 60.0  # real leases outlive the test on a loaded host; the give-up clock is the test's own
BOUND_S = 2 * TTL_S + 2 * DEFAULT_INTERVAL_S  # two lease TTLs and two reaper passes (``resends.py``)


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """A cluster of this module's own: its test takes a slot away, the others served meanwhile."""
    with partly_served() as local:
        yield local


def test_a_kept_result_whose_slot_is_unserved_does_not_age_while_another_slot_answers(
    cluster: LocalCluster,
) -> None:
    assert slot_of("served") != slot_of("unserved")
    cluster.flushall()
    for sid, key in (("served", "a"), ("unserved", "b")):
        publish(Delivery(cluster.client()), sid, {"w": [item(key, 0, 5)]}, lease_ttl_ms=int(TTL_S * 1000))
    settings = SessionSettings("w", retry_for_s=0.3)
    session = WorkerSession(Delivery(cluster.client()), Holdings(2), settings)
    clock = _Clock()
    session.resends.clock = clock
    held = {h.lease.schedule_id: h for h in asyncio.run(session.claim(2))}
    slot, owner = unserve(cluster, "unserved")
    try:
        # Unanswered past its retry window: kept. The client says so as SlotNotCoveredError where its
        # slot map already lacks the slot, or as the node's CLUSTERDOWN (ClusterDownError, a
        # RedisError) where the map still names the master (seen on a loaded host: the map's refresh
        # raced the DELSLOTS).
        with pytest.raises((RedisClusterException, ClusterDownError)):
            asyncio.run(session.complete(held["unserved"], RESULT))
        beats = []
        for at_s in (1.0, BOUND_S / 2, BOUND_S + 1.0, 2 * BOUND_S):
            clock.now = 1000.0 + at_s
            beats.append((asyncio.run(session.heartbeat()), session.heartbeats_failing))
        assert beats == [([], False)] * 4  # the other slot's heartbeat went through each time
        assert (len(session.resends), session.stats.lost) == (1, 0)  # before: given up at BOUND_S + 1
    finally:
        serve(slot, owner)
    deadline = time.monotonic() + 30.0  # the cluster client finds the slot served again
    while len(session.resends) and time.monotonic() < deadline:
        clock.now += 1.0
        asyncio.run(session.heartbeat())
    assert (len(session.resends), session.stats.lost, session.stats.accepted) == (0, 0, 1)
    assert [r.key for r in Delivery(cluster.client()).read_results("unserved")] == ["b#0"]
    assert [h.lease.key for h in session.holdings.all()] == ["a#0"]


def test_a_heartbeat_extends_the_served_slots_leases_while_one_slot_is_unserved(
    cluster: LocalCluster,
) -> None:
    """Leases on ``aaa`` (its slot unserved) and ``zzz``, heartbeated in that order past ``zzz``'s TTL
    while a reaper passes: ``aaa`` is said nothing of (its leases alone in outage), ``zzz`` is extended.
    Before, ``aaa``'s error ended the heartbeat's walk, and the reaper requeued ``zzz`` as lapsed under
    the sidecar still running it."""
    assert slot_of("aaa") != slot_of("zzz")
    cluster.flushall()
    for sid in ("aaa", "zzz"):  # claimed, and heartbeated, in that order
        publish(Delivery(cluster.client()), sid, {"w": [item(sid, 0, 5)]}, lease_ttl_ms=3000)
    session = WorkerSession(Delivery(cluster.client()), Holdings(2), SessionSettings("w"))
    assert [h.lease.schedule_id for h in asyncio.run(session.claim(2))] == ["aaa", "zzz"]
    slot, owner = unserve(cluster, "aaa")
    try:
        until = time.monotonic() + 4.5  # 1.5 TTLs
        while time.monotonic() < until:
            assert asyncio.run(session.heartbeat()) == []
            assert not session.heartbeats_failing  # ``aaa`` unheard of; no outage of the session
            reap_all(session.delivery, unserved=[])
            time.sleep(0.2)
        zzz = session.delivery.progress("zzz")
    finally:
        serve(slot, owner)
    assert (zzz.running, zzz.queued) == (1, 0)
    assert sorted(h.lease.schedule_id for h in session.holdings.all()) == ["aaa", "zzz"]

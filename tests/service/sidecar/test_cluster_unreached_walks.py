"""A sidecar's walks over its schedules (claims, heartbeats) and the reaper's pass go on past a
schedule whose Redis Cluster slot no master serves, or whose master is down, while the cluster serves
its other slots (``cluster-require-full-coverage no``; a real cluster, ``service/delivery/reach.py``).

Each walk raised at the first such schedule: a claim leased nothing while younger schedules were
served; a heartbeat extended the others in Redis but its caller never heard of them (their new
deadlines dropped, one of their leases gone unnoticed until the slot was served); a master down
(``ConnectionError``) ended the reaper's pass and the heartbeat's walk there.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import RedisClusterException

from service.delivery import Delivery, keys
from service.delivery.reaper import reap_all
from service.delivery.retries import short_retry
from service.sidecar.holdings import Holdings, lease_id
from service.sidecar.session import SessionSettings, WorkerSession
from tests.cluster import LocalCluster, key_owner, partly_served, serve, serve_everywhere, slot_of, unserve
from tests.service.sidecar.procs import item, publish

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """A cluster of this module's own: its tests take a slot away, the others served meanwhile."""
    with partly_served() as local:
        yield local


def _session(cluster: LocalCluster, client: RedisCluster | None = None) -> WorkerSession:
    return WorkerSession(Delivery(client or cluster.client()), Holdings(4), SessionSettings("w"))


def _as_deployed(cluster: LocalCluster) -> RedisCluster:
    """A cluster client with the retries the service's and the sidecar's have (``short_retry``), not
    redis-py's default, whose 1-10 s backoffs after each refused connection to a killed master made
    most of this module's longest test (20 s; the walks and what they assert are the same)."""
    return RedisCluster(startup_nodes=cluster.startup_nodes, decode_responses=True, retry=short_retry())


def _publish_both(cluster: LocalCluster, ttl_ms: int = 60_000) -> None:
    """``aaa`` then ``zzz`` (oldest first in the inbox, claimed and heartbeated in that order)."""
    assert slot_of("aaa") != slot_of("zzz")
    cluster.flushall()
    for sid in ("aaa", "zzz"):
        publish(Delivery(cluster.client()), sid, {"w": [item(sid, 0, 5)]}, lease_ttl_ms=ttl_ms)


@pytest.mark.parametrize("settings_read", [False, True], ids=["new-schedule", "known-schedule"])
def test_a_claim_leases_from_the_younger_schedule_while_the_oldest_ones_slot_is_unserved(
    cluster: LocalCluster, settings_read: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Its settings not read yet (the inbox's first read) or read: the claim goes on to ``zzz``, says
    so once, and claims ``aaa`` once its slot is served again."""
    _publish_both(cluster)
    session = _session(cluster)
    if settings_read:
        asyncio.run(session.schedules())
    caplog.set_level(logging.INFO, logger="service.sidecar")
    slot, owner = unserve(cluster, "aaa")
    try:
        first = asyncio.run(session.claim(2))
        again = asyncio.run(session.claim(2))  # nothing left in zzz: no error, no second warning
    finally:
        serve_everywhere(cluster, slot, owner)
    assert ([h.lease.key for h in first], again) == (["zzz#0"], [])
    warned = [r.getMessage().split(" (")[0] for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == ["claims do not reach schedule aaa"]
    assert _eventually(lambda: [h.lease.key for h in asyncio.run(session.claim(2))]) == ["aaa#0"]
    assert "claims reach schedule aaa again" in caplog.text


def test_a_claim_that_reaches_no_schedule_raises_the_outage(cluster: LocalCluster) -> None:
    cluster.flushall()
    publish(Delivery(cluster.client()), "aaa", {"w": [item("aaa", 0, 5)]})
    session = _session(cluster)
    slot, owner = unserve(cluster, "aaa")
    try:
        with pytest.raises(RedisClusterException):
            asyncio.run(session.claim(2))
    finally:
        serve_everywhere(cluster, slot, owner)


def test_a_heartbeat_refreshes_and_reports_the_reached_schedules_leases_while_one_slot_is_unserved(
    cluster: LocalCluster,
) -> None:
    """``zzz``'s lease, handed back behind the sidecar's back, is reported lost at once, and the one
    it still holds gets its new deadline; ``aaa``'s lease is kept, unheard of, and the beat is no
    outage of the session. Before, the beat was an outage: nothing refreshed, nothing lost."""
    _publish_both(cluster)
    for sid in ("aaa", "zzz"):  # a second item of zzz: one lease stays, one is taken away
        publish(Delivery(cluster.client()), f"{sid}2", {"w": [item(sid, 1, 5)]}, lease_ttl_ms=60_000)
    session = _session(cluster)
    held = {h.lease.schedule_id: h for h in asyncio.run(session.claim(4))}
    assert sorted(held) == ["aaa", "aaa2", "zzz", "zzz2"]
    before = held["zzz2"].lease.deadline_ms
    Delivery(cluster.client()).release([held["zzz"].lease])  # not this sidecar's doing
    time.sleep(0.01)  # the server's clock moves on: a refreshed deadline is later
    slot, owner = unserve(cluster, "aaa")
    try:
        lost = asyncio.run(session.heartbeat())
        failing = session.heartbeats_failing
    finally:
        serve_everywhere(cluster, slot, owner)
    assert ([h.lease.key for h in lost], failing) == (["zzz#0"], False)
    assert held["zzz2"].lease.deadline_ms > before
    assert sorted(h.lease.schedule_id for h in session.holdings.all()) == ["aaa", "aaa2", "zzz2"]


def _eventually(read: object, within_s: float = 30.0) -> object:
    """``read()`` until it is truthy (the cluster client finds the slot served again) or time runs out."""
    assert callable(read)
    deadline = time.monotonic() + within_s
    value = read()
    while not value and time.monotonic() < deadline:
        time.sleep(0.1)
        value = read()
    return value


def test_a_master_down_is_passed_over_by_the_heartbeat_the_claim_and_the_reaper() -> None:
    """One master's process killed (connection refused), the others serving: a heartbeat extends the
    leases on the others, a claim leases from them, and a reaper pass requeues their lapsed leases.
    Before, its ``ConnectionError`` (after the client's own retries, seconds) ended each walk there."""
    with partly_served() as cluster:
        indexes = {key_owner(cluster, keys.inbox("w")), key_owner(cluster, keys.active_index())}
        dead = next(node for node in cluster.nodes if node.port not in indexes)
        down, up = _on(cluster, "a", dead.port, True), _on(cluster, "z", dead.port, False)
        delivery = Delivery(_as_deployed(cluster))
        for sid, n in ((down, 2), (up, 4)):  # claimed, heartbeated and due for reaping in this order
            publish(delivery, sid, {"w": [item(sid, i, 5) for i in range(n)]}, lease_ttl_ms=60_000)
            time.sleep(0.002)
        lapsing = _on(cluster, "b", dead.port, True), _on(cluster, "y", dead.port, False)
        for sid in lapsing:  # another worker's leases, lapsing at once, due in this order
            publish(delivery, sid, {"x": [item(sid, 0, 5)]}, lease_ttl_ms=100)
            delivery.claim(sid, "x", 1)
            time.sleep(0.002)
        session = _session(cluster, _as_deployed(cluster))
        held = {h.lease.key: h for h in asyncio.run(session.claim(4))}
        assert sorted(held) == [f"{down}#0", f"{down}#1", f"{up}#0", f"{up}#1"]
        before = held[f"{up}#0"].lease.deadline_ms
        dead.kill()
        time.sleep(0.01)
        lost = asyncio.run(session.heartbeat())
        failing = session.heartbeats_failing
        claimed = asyncio.run(session.claim(2))
        unserved: list[Exception] = []
        graced = reap_all(delivery, unserved=unserved)  # untouched for a TTL: graced once (``pulse``)
        time.sleep(0.3)
        reaped = reap_all(delivery, unserved=unserved)
    assert (lost, failing) == ([], False)
    assert held[f"{up}#0"].lease.deadline_ms > before
    assert sorted(h.lease.key for h in claimed) == [f"{up}#2", f"{up}#3"]
    assert sum(p[lapsing[1]].requeued for p in (graced, reaped) if lapsing[1] in p) == 1
    assert [type(e) for e in unserved] == [redis.ConnectionError] * 2  # one a pass, for its node


def _on(cluster: LocalCluster, start: str, port: int, there: bool) -> str:
    """A schedule id starting ``start`` whose keys are (``there``) or are not on the master at ``port``."""
    ids = (f"{start}{i}" for i in range(10_000))
    return next(sid for sid in ids if (key_owner(cluster, keys.schedule_keys(sid).meta) == port) == there)


class _Walked(Delivery):
    """Real cluster; keeps the schedules each heartbeat script was sent for, in order."""

    walked: list[str]

    def _call(self, script: Any, schedule_id: str, args: Sequence[Any]) -> Any:
        if script is self.scripts.heartbeat:
            self.walked.append(schedule_id)
        return super()._call(script, schedule_id, args)


def test_a_heartbeat_walks_the_schedules_it_did_not_reach_last_time_last(cluster: LocalCluster) -> None:
    """A master down costs its client's retries (about 4 s) at each beat: first in the walk, ``aaa``
    held ``zzz``'s extension back by as much every time. Before: ``aaa`` first at every beat."""
    _publish_both(cluster)
    delivery = _Walked(cluster.client())
    session = WorkerSession(delivery, Holdings(2), SessionSettings("w"))
    asyncio.run(session.claim(2))
    slot, owner = unserve(cluster, "aaa")
    try:
        walks = []
        for _ in range(2):
            delivery.walked = []
            asyncio.run(session.heartbeat())
            walks.append(delivery.walked)
    finally:
        serve_everywhere(cluster, slot, owner)
    assert walks == [["aaa", "zzz"], ["zzz", "aaa"]]


def test_a_claim_whose_settings_reads_answered_is_no_outage_at_two_unserved_slots(
    cluster: LocalCluster,
) -> None:
    """``aaa``'s settings are read (its slot answered), then ``mmm``'s and ``zzz``'s slots fail: the
    walk reached a schedule, so the claim leases from ``aaa``. Before, a settings read that answered
    was not counted as reached, and the second failed slot raised the claim as an outage."""
    cluster.flushall()
    slots = {slot_of(sid) for sid in ("aaa", "mmm", "zzz")} | {key_slot(keys.inbox("w").encode())}
    assert len(slots) == 4
    for sid in ("aaa", "mmm", "zzz"):  # oldest first in the inbox, in this order
        publish(Delivery(cluster.client()), sid, {"w": [item(sid, 0, 5)]}, lease_ttl_ms=60_000)
        time.sleep(0.002)
    session = _session(cluster)
    taken = [unserve(cluster, sid) for sid in ("mmm", "zzz")]
    try:
        claimed = asyncio.run(session.claim(3))
    finally:
        for slot, owner in taken:
            serve(slot, owner)
        serve_everywhere(cluster, *taken[-1])  # every node sees both served again
    assert [h.lease.key for h in claimed] == ["aaa#0"]


def _two_masters(cluster: LocalCluster) -> str:
    """An id starting "m" on none of the masters of ``aaa``, ``zzz`` and the inbox: with ``aaa``'s,
    its slot's failure is a second master's (one master's slots count once toward an outage)."""
    taken = {key_owner(cluster, keys.schedule_keys(sid).meta) for sid in ("aaa", "zzz")}
    taken.add(key_owner(cluster, keys.inbox("w")))
    free = next(node.port for node in cluster.nodes if node.port not in taken)
    return _on(cluster, "m", free, True)


def test_a_heartbeat_whose_first_two_slots_fail_reaches_the_others_at_the_next_beat(
    cluster: LocalCluster,
) -> None:
    """``aaa``'s and ``mmm``'s slots unserved, on two masters, first in the walk: the first beat is an
    outage (two masters failed, none reached), and the next walks them last, so ``zzz``'s lease is
    extended. Before, the outage left the order as it was: every beat failed on the same two first, and
    ``zzz``'s lease, its slot served, lapsed under the sidecar still running it."""
    cluster.flushall()
    mmm = _two_masters(cluster)
    for sid in ("aaa", mmm, "zzz"):  # claimed, so walked, in this order
        publish(Delivery(cluster.client()), sid, {"w": [item(sid, 0, 5)]}, lease_ttl_ms=60_000)
        time.sleep(0.002)
    session = _session(cluster)
    held = {h.lease.schedule_id: h for h in asyncio.run(session.claim(3))}
    assert sorted(held) == sorted(["aaa", mmm, "zzz"])
    before = held["zzz"].lease.deadline_ms
    time.sleep(0.01)  # the server's clock moves on: a refreshed deadline is later
    taken = [unserve(cluster, sid) for sid in ("aaa", mmm)]
    try:
        asyncio.run(session.heartbeat())
        first_failed = session.heartbeats_failing
        asyncio.run(session.heartbeat())
        then_failing = session.heartbeats_failing
    finally:
        for slot, owner in taken:
            serve(slot, owner)
        serve_everywhere(cluster, *taken[-1])
    assert (first_failed, then_failing) == (True, False)
    extended = session.holdings.get(lease_id(held["zzz"].lease))
    assert extended is not None
    assert extended.lease.deadline_ms > before


def test_a_claim_whose_first_two_slots_fail_claims_from_the_others_at_the_next_claim(
    cluster: LocalCluster,
) -> None:
    """Every schedule's settings read, ``aaa``'s and ``mmm``'s slots then unserved, on two masters: the
    first claim is an outage (two masters failed, none reached), and the next walks them last and
    leases from ``zzz``. Before, every claim failed on the same two first: the sidecar leased nothing
    while they lasted."""
    cluster.flushall()
    mmm = _two_masters(cluster)
    for sid in ("aaa", mmm, "zzz"):  # oldest first in the inbox, in this order
        publish(Delivery(cluster.client()), sid, {"w": [item(sid, 0, 5)]}, lease_ttl_ms=60_000)
        time.sleep(0.002)
    session = _session(cluster)
    asyncio.run(session.schedules())
    taken = [unserve(cluster, sid) for sid in ("aaa", mmm)]
    try:
        with pytest.raises(RedisClusterException):
            asyncio.run(session.claim(1))
        claimed = asyncio.run(session.claim(1))
    finally:
        for slot, owner in taken:
            serve(slot, owner)
        serve_everywhere(cluster, *taken[-1])
    assert [h.lease.key for h in claimed] == ["zzz#0"]

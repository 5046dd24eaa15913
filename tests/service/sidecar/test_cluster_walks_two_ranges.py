"""A sidecar's heartbeat over a real 3-master Redis Cluster where two masters each dropped a slot range
(``cluster-require-full-coverage no``): each node that refused a schedule is asked which slots no
master serves, once, and the walk passes the rest of its range over (``Reach.missed``: once a walk for
each such node, not once a walk). A walk that asked only the first node paid a call of 0.26 s (redis-py's
fixed wait on a slot not served) for every other schedule of the second range."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import redis
from redis.cluster import RedisCluster

from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.cluster import SLOTS, LocalCluster, partly_served, serve_ranges, unserve_range
from tests.service.sidecar.cluster_walks import FIXED, Asked, cluster_asked, publish_each, schedule_slot

pytestmark = pytest.mark.slow
PER_RANGE = 3  # schedules on distinct slots of each dropped range
DROPPED = (range(SLOTS // 3 + 500, SLOTS // 3 + 700), range(2 * SLOTS // 3 + 500, 2 * SLOTS // 3 + 700))


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """A cluster of this module's own: its test takes two slot ranges away, the others served meanwhile."""
    with partly_served() as local:
        yield local


def _ids() -> list[str]:
    """One id on the first master's share, then ``PER_RANGE`` on distinct slots of each range of ``DROPPED``:
    the served schedule first, so the walk has reached a schedule before two masters fail (no outage)."""
    found: list[dict[int, str]] = [{} for _ in DROPPED]
    for n in range(1_000_000):
        sid, slot = f"a{n}", schedule_slot(f"a{n}")
        for dropped, ids in zip(DROPPED, found, strict=True):
            if slot in dropped and slot not in FIXED and len(ids) < PER_RANGE:
                ids.setdefault(slot, sid)
        if all(len(ids) == PER_RANGE for ids in found):
            break
    served = next(f"z{n}" for n in range(100_000) if schedule_slot(f"z{n}") < SLOTS // 3 - 1)
    return [served, *(sid for ids in found for sid in ids.values())]


def _toward(asked: list[Asked], dropped: range) -> int:
    return sum(1 for each in asked if each.command in ("EVAL", "EVALSHA") and each.slot in dropped)


def test_a_heartbeat_asks_one_schedule_of_each_masters_dropped_range_and_each_node_once(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = _ids()
    delivery = publish_each(cluster, ids)
    session = WorkerSession(delivery, Holdings(16), SessionSettings("w"))
    held = asyncio.run(session.claim(len(ids)))
    assert len(held) == len(ids)
    client = delivery.client
    assert isinstance(client, RedisCluster)
    with redis.Redis(port=cluster.nodes[0].port) as admin:
        slots = admin.cluster("SLOTS")
    owners = {
        dropped: next(int(m[1]) for lo, hi, m, *_ in slots if lo <= dropped.start <= hi)
        for dropped in DROPPED
    }
    assert len(set(owners.values())) == len(DROPPED)  # two masters' ranges
    asked = cluster_asked(client, monkeypatch)
    for dropped in DROPPED:
        unserve_range(cluster, dropped)
    try:
        lost = asyncio.run(session.heartbeat())
    finally:
        serve_ranges(cluster, owners)
    assert (lost, session.heartbeats_failing) == ([], False)
    assert [_toward(asked, dropped) for dropped in DROPPED] == [1, 1]
    assert sum(1 for each in asked if each.command == "CLUSTER SLOTS") == len(DROPPED)

"""A sidecar's walks over its schedules on a real 3-master Redis Cluster with a slot range no master
serves (``cluster-require-full-coverage no``): the first schedule of the range is asked, the node that
refused it is asked which slots no master serves (``CLUSTER SLOTS``, ``coverage.py``), and the walk
passes the range's other schedules over unasked, as the reaper's pass does (``reach.py``). The claim
walk runs on the sidecar's event loop: the node is asked in a thread, not on the loop.

Before, the sidecar's walks never asked: each schedule of the range cost its own call, 0.26 s each
(redis-py's fixed wait on a slot not served), and the served schedules behind them waited as long."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from service.delivery import coverage
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.cluster import SLOTS, LocalCluster, partly_served, serve_ranges, unserve_range
from tests.service.sidecar.cluster_walks import FIXED, Asked, cluster_asked, publish_each, schedule_slot

pytestmark = pytest.mark.slow
DROPPED = range(SLOTS // 3 + 500, SLOTS // 3 + 700)  # of the second master's share


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """A cluster of this module's own: its tests take a slot range away, the others served meanwhile."""
    with partly_served() as local:
        yield local


def _ids() -> list[str]:
    """Four ids on distinct slots of ``DROPPED``, then one on the first master's share."""
    found: dict[int, str] = {}
    for n in range(1_000_000):
        sid = f"a{n}"
        if schedule_slot(sid) in DROPPED and schedule_slot(sid) not in FIXED:
            found.setdefault(schedule_slot(sid), sid)
        if len(found) == 4:
            break
    served = next(f"z{n}" for n in range(100_000) if schedule_slot(f"z{n}") < SLOTS // 3 - 1)
    return [*found.values(), served]


def _published(cluster: LocalCluster) -> tuple[WorkerSession, list[str]]:
    """Each of ``_ids`` published for worker ``w`` with one item, oldest first in that order."""
    ids = _ids()
    return WorkerSession(publish_each(cluster, ids), Holdings(8), SessionSettings("w")), ids


def _toward_dropped(asked: list[Asked], command: str) -> int:
    return sum(1 for each in asked if each.command == command and each.slot in DROPPED)


def _while_dropped(cluster: LocalCluster, then: Callable[[], Any]) -> Any:
    """``then()`` while no master serves ``DROPPED``; served again by its master after."""
    with redis.Redis(port=cluster.nodes[0].port) as admin:
        owner = next(int(m[1]) for lo, hi, m, *_ in admin.cluster("SLOTS") if lo <= DROPPED.start <= hi)
    unserve_range(cluster, DROPPED)
    try:
        return then()
    finally:
        serve_ranges(cluster, {DROPPED: owner})


def test_a_claim_asks_one_schedule_of_a_dropped_range_and_the_node_off_its_event_loop(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every schedule's settings read: the claim asks the range's first schedule, the node that refused
    it (in a thread, not the loop's), and leases from the served schedule. Before: four claim calls
    to the range, no ``CLUSTER SLOTS``."""
    session, ids = _published(cluster)
    asyncio.run(session.schedules())
    client = session.delivery.client
    assert isinstance(client, RedisCluster)
    asked = cluster_asked(client, monkeypatch)
    claimed = _while_dropped(cluster, lambda: asyncio.run(session.claim(1)))
    learned = [each for each in asked if each.command == "CLUSTER SLOTS"]
    assert [h.lease.key for h in claimed] == [f"{ids[-1]}#0"]
    assert _toward_dropped(asked, "EVALSHA") + _toward_dropped(asked, "EVAL") == 1
    assert len(learned) == 1
    assert learned[0].thread != threading.get_ident()  # ``asyncio.run``'s loop runs on this thread


def test_a_claims_settings_reads_ask_one_schedule_of_a_dropped_range(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No schedule's settings read yet: the walk reads the range's first schedule's, learns the range,
    and reads and leases the served one. Before: a settings read to each of the four."""
    session, ids = _published(cluster)
    client = session.delivery.client
    assert isinstance(client, RedisCluster)
    asked = cluster_asked(client, monkeypatch)
    claimed = _while_dropped(cluster, lambda: asyncio.run(session.claim(1)))
    assert [h.lease.key for h in claimed] == [f"{ids[-1]}#0"]
    assert _toward_dropped(asked, "HMGET") == 1


def test_a_heartbeat_asks_one_schedule_of_a_dropped_range(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every schedule's item leased, then the range dropped: the beat extends the served schedule's
    lease and asks one of the range's four. Before: a heartbeat call to each."""
    session, ids = _published(cluster)
    held = asyncio.run(session.claim(len(ids)))
    assert len(held) == len(ids)
    client = session.delivery.client
    assert isinstance(client, RedisCluster)
    asked = cluster_asked(client, monkeypatch)
    lost = _while_dropped(cluster, lambda: asyncio.run(session.heartbeat()))
    assert (lost, session.heartbeats_failing) == ([], False)
    assert _toward_dropped(asked, "EVALSHA") + _toward_dropped(asked, "EVAL") == 1


def test_a_range_served_again_is_claimed_from_at_the_next_claim(cluster: LocalCluster) -> None:
    """What a walk learned unserved is forgotten with the walk: the claim after the range is served
    again leases from its four schedules, none passed over on the last claim's word."""
    session, ids = _published(cluster)
    asyncio.run(session.schedules())
    first = _while_dropped(cluster, lambda: asyncio.run(session.claim(len(ids))))
    assert [h.lease.key for h in first] == [f"{ids[-1]}#0"]
    again = asyncio.run(session.claim(len(ids)))
    assert sorted(h.lease.key for h in again) == sorted(f"{sid}#0" for sid in ids[:-1])


def test_a_heartbeat_extends_a_lease_the_asked_node_wrongly_thinks_unserved(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node asked which slots are unserved answers from its own view, which can lag (it has not
    heard yet that another master serves a slot again): a slot the client sends to another master is
    still asked, so a node's stale view never skips a served lease's extension. Before, the served
    schedule's lease went unextended at every beat whose walk asked such a node."""
    session, ids = _published(cluster)
    held = asyncio.run(session.claim(len(ids)))
    assert len(held) == len(ids)
    real = coverage.unserved_slots

    def stale(client: RedisCluster, node: Any) -> frozenset[int] | None:
        return (real(client, node) or frozenset()) | {schedule_slot(ids[-1])}

    monkeypatch.setattr("service.delivery.reach.unserved_slots", stale)
    client = session.delivery.client
    assert isinstance(client, RedisCluster)
    asked = cluster_asked(client, monkeypatch)
    lost = _while_dropped(cluster, lambda: asyncio.run(session.heartbeat()))
    assert (lost, session.heartbeats_failing) == ([], False)  # before: passed over, and the beat an outage
    assert any(each.command in ("EVAL", "EVALSHA") and each.slot == schedule_slot(ids[-1]) for each in asked)

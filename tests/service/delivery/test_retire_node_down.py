"""A node that does not answer as a settled schedule is retired from its indexes
(``DeliveryIndexes._retire``: the active and lapse indexes, its workers' inboxes, other slots than the
schedule's) is blamed as itself (``errors.IndexNodeDown``, a warning naming it), not as the schedule's
master, whose script had just answered, on a real 3-master Redis Cluster with the inbox's master killed.

redis-py's pipeline over those keys raised a bare "Connection refused" naming no node, which a walk
took for the schedule's master's: a heartbeat walk passed every other schedule of that live master
over as down (their leases unextended for the beat, the sidecar's warning naming the wrong schedules),
and a call of its own (``remap.remapped``: a sidecar's completion of the last item) asked another
master about a master that had answered (review53b). Since cluster55 the script's answer stands and
the retire is left to the reapers (``test_retire_after_answer``): the walk and the call go on as
answered."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from functools import partial

import pytest
from redis.cluster import RedisCluster

from service.delivery import Delivery, keys, remap
from service.delivery.outcomes import CompletionOutcome
from service.redis_conn import connect
from service.settings import Settings
from service.sidecar.unreached import Unreached
from tests.cluster import LocalCluster, serve_the_rest
from tests.service.delivery.conftest import schedule
from tests.service.failover import TIMEOUT_S, map_reads, paced
from tests.service.finished import RESULT

pytestmark = pytest.mark.slow
T0 = 1_000_000  # explicit clock (ms)
TTL_MS = 1000


@pytest.fixture
def inbox_down(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Delivery, list[str], str, list[int]]]:
    """Schedules ``last`` (its one item's lease lapsed, on its last attempt: a heartbeat settles it)
    and ``other`` (a current lease), both on one master, worker ``a``'s inbox on another, killed; the
    delivery (the service's client, its own map refresh paced), the two schedules, the killed node's
    name and the live masters' ports. One share window a test (``remap.RECENT_S``)."""
    monkeypatch.setattr(remap, "RECENT_S", 3600.0)
    with LocalCluster() as local:
        serve_the_rest(local)
        settings = Settings(redis_url=local.url, redis_cluster=True, redis_timeout_s=TIMEOUT_S)
        delivery = Delivery(connect(settings))
        client = paced(delivery)
        inbox = _node(client, keys.inbox("a"))
        first = next(f"s{n}" for n in range(1000) if _master(client, f"s{n}") != inbox)
        second = next(f"t{n}" for n in range(1000) if _master(client, f"t{n}") == _master(client, first))
        sids = [first, second]
        delivery.publish(schedule(sids[0], {"a": 1}, ttl_ms=TTL_MS, max_attempts=1), now_ms=T0)
        delivery.publish(schedule(sids[1], {"a": 1}, ttl_ms=TTL_MS), now_ms=T0)
        next(node for node in local.nodes if f"127.0.0.1:{node.port}" == inbox).kill()
        try:
            yield delivery, sids, inbox, [n.port for n in local.nodes if f"127.0.0.1:{n.port}" != inbox]
        finally:
            client.close()


def test_a_heartbeat_walk_names_the_inbox_node_and_takes_the_settled_schedules_beat_as_answered(
    inbox_down: tuple[Delivery, list[str], str, list[int]], caplog: pytest.LogCaptureFixture
) -> None:
    delivery, (last, other), inbox, _ = inbox_down
    lapsed = delivery.claim(last, "a", 1, now_ms=T0)
    current = delivery.claim(other, "a", 1, now_ms=T0 + 1500)
    with caplog.at_level(logging.WARNING, logger="service"):
        alive, reach = delivery.heartbeat_reaching([*lapsed, *current], now_ms=T0 + 2000)
        Unreached("heartbeats").tell(reach)
    assert [lease.key for lease in alive] == [current[0].key]  # its master answered: extended
    assert dict(reach.missing) == {}  # both schedules' masters answered
    [told] = caplog.records
    assert f"schedule {last}" in told.getMessage()
    assert f"node {inbox} did not answer" in told.getMessage()
    assert delivery.progress(last).failed == 1  # the script ran: dead-lettered, settled


def test_a_call_of_its_own_asks_no_master_about_the_schedules_master_that_answered(
    inbox_down: tuple[Delivery, list[str], str, list[int]],
) -> None:
    """The completion of the last item settles the schedule; its retire meets the killed inbox node,
    and the completion is answered."""
    delivery, (last, _), _, live = inbox_down
    (lease,) = delivery.claim(last, "a", 1)
    before = map_reads(live)
    meta = delivery.keys(last).meta
    complete = partial(delivery.complete, lease, RESULT)
    assert remap.remapped(delivery.client, meta, complete) is CompletionOutcome.ACCEPTED
    assert map_reads(live) - before == 0


def _node(client: RedisCluster, key: str) -> str:
    """The name of the node the client's map sends ``key`` to."""
    return str(client.get_node_from_key(key).name)  # type: ignore[no-untyped-call]


def _master(client: RedisCluster, schedule_id: str) -> str:
    """The name of ``schedule_id``'s master in the client's map."""
    return _node(client, keys.schedule_keys(schedule_id).meta)


def test_a_retire_whose_first_node_is_down_still_retires_the_indexes_of_the_nodes_that_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The active and lapse indexes' master killed, the schedule and its worker's inbox on live ones:
    the completion that settles the schedule is answered as its script answered, a warning blames the
    indexes' node, and the inbox is retired all the same: the live nodes' pipelines are sent whatever
    the indexes' node answers (cluster55 sends the active index's node last)."""
    with LocalCluster() as local:
        serve_the_rest(local)
        settings = Settings(redis_url=local.url, redis_cluster=True, redis_timeout_s=TIMEOUT_S)
        delivery = Delivery(connect(settings))
        client = paced(delivery)
        try:
            indexes = _node(client, keys.active_index())
            worker = next(f"w{n}" for n in range(1000) if _node(client, keys.inbox(f"w{n}")) != indexes)
            sid = next(f"s{n}" for n in range(1000) if _master(client, f"s{n}") != indexes)
            delivery.publish(schedule(sid, {worker: 1}), now_ms=T0)
            (lease,) = delivery.claim(sid, worker, 1, now_ms=T0)
            assert client.zscore(keys.inbox(worker), sid) is not None  # announced, until retired
            next(node for node in local.nodes if f"127.0.0.1:{node.port}" == indexes).kill()
            with caplog.at_level(logging.WARNING, logger="service"):
                answer = delivery.complete(lease, RESULT, now_ms=T0 + 1)
            assert answer is CompletionOutcome.ACCEPTED
            [told] = [r for r in caplog.records if "left to the reapers" in r.getMessage()]
            assert indexes in told.getMessage()
            assert client.zscore(keys.inbox(worker), sid) is None
        finally:
            client.close()

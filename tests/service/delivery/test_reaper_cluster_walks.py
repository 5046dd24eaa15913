"""The reaper's pass on a real 3-master Redis Cluster that serves all but a few slots
(``cluster-require-full-coverage no``): what the last pass missed goes last, and the failures of one
master's slots are one master's, never the outage of the whole walk (``reach.py``, ``reaper.py``).

Before, a pass walked the due schedules in their order and gave up as an outage once two slots had
failed with nothing reached: two unserved schedules due first raised every pass, and a served
schedule's lapsed lease behind them stayed running, also where both slots were one master's."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import RedisClusterException

from service.delivery import Delivery, ReapReport, keys
from service.delivery.errors import REDIS_FAILED
from service.delivery.reach import Reach
from service.delivery.reaper import Reaper, reap_all
from service.delivery.retries import short_retry
from tests.cluster import SLOTS, LocalCluster, serve, serve_everywhere, serve_the_rest, unserve
from tests.service.sidecar.procs import item, publish

pytestmark = pytest.mark.slow
INDEXES = {key_slot(k.encode()) for k in (keys.active_index(), keys.lapse_index())}


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """A cluster of this module's own: its tests take slots away, the others served meanwhile."""
    with LocalCluster() as local:
        serve_the_rest(local)
        yield local


def _on_master(index: int, start: str, avoid: set[int] = INDEXES) -> str:
    """An id starting ``start`` whose slot is the ``index``-th master's (``valkey-cli --cluster create``
    splits the slots evenly in order) and none of ``avoid``."""
    share = SLOTS // 3
    for n in range(100_000):
        sid = f"{start}{n}"
        slot = key_slot(keys.schedule_keys(sid).meta.encode())
        if slot // share == index and slot < 3 * share and slot not in avoid:
            return sid
    raise AssertionError("no such id")


def _slot(sid: str) -> int:
    return key_slot(keys.schedule_keys(sid).meta.encode())


def _lapsing(cluster: LocalCluster, *ids: str) -> Delivery:
    """Each of ``ids`` published (due for reaping in this order) with one lease of ``x`` lapsing at once."""
    cluster.flushall()
    delivery = Delivery(cluster.client())
    for sid in ids:
        publish(delivery, sid, {"x": [item(sid, 0, 5)]}, lease_ttl_ms=100)
        assert len(delivery.claim(sid, "x", 1)) == 1
        time.sleep(0.002)  # published in order: due in order
    return delivery


def _after(wait_s: float, then: Callable[[], dict[str, ReapReport]]) -> dict[str, ReapReport]:
    time.sleep(wait_s)
    return then()


def _requeued(reports: dict[str, ReapReport], sid: str) -> int:
    return reports[sid].requeued if sid in reports else 0


def test_two_unserved_slots_of_one_master_due_first_are_no_outage(cluster: LocalCluster) -> None:
    """Both of the first two schedules' slots unserved, on one master: the pass goes on and requeues the
    served schedule's lapsed lease (graced once first: the leases' first visit after a silence).
    Before, the second slot raised the pass as an outage before ``zzz`` was asked."""
    first = _on_master(1, "a")
    second = _on_master(1, "b", INDEXES | {_slot(first)})
    served = _on_master(0, "z")
    delivery = _lapsing(cluster, first, second, served)
    taken = [unserve(cluster, sid) for sid in (first, second)]
    unserved: list[Exception] = []
    try:
        passes = [_after(0.3, lambda: reap_all(delivery, unserved=unserved)) for _ in range(3)]
    finally:
        for slot, owner in taken:
            serve(slot, owner)
        serve_everywhere(cluster, *taken[-1])
    assert sum(_requeued(p, served) for p in passes) == 1
    assert len(unserved) == 2 * len(passes)  # each pass, each slot: one failed call


def test_two_slots_the_clients_map_dropped_due_first_are_no_outage(cluster: LocalCluster) -> None:
    """A client built with ``require_full_coverage=False`` drops an unserved slot from its map, so the
    slot has no master to count for: all such slots count as one, and the pass goes on to the served
    schedule. Before, each dropped slot counted as a master of its own, and the second raised the pass
    as an outage before ``zzz`` was asked."""
    first = _on_master(1, "a")
    second = _on_master(2, "b", INDEXES | {_slot(first)})
    served = _on_master(0, "z")
    _lapsing(cluster, first, second, served)
    taken = [unserve(cluster, sid) for sid in (first, second)]
    client = RedisCluster(
        startup_nodes=cluster.startup_nodes, require_full_coverage=False, retry=short_retry()
    )
    unserved: list[Exception] = []
    try:
        dropped = [_mapped(client, sid) for sid in (first, second, served)]
        reports = reap_all(Delivery(client), unserved=unserved)
    finally:
        client.close()
        for slot, owner in taken:
            serve(slot, owner)
        serve_everywhere(cluster, *taken[-1])
    assert dropped == [False, False, True]
    assert (served in reports, len(unserved)) == (True, 2)


def _mapped(client: RedisCluster, sid: str) -> bool:
    """Whether ``client``'s slot map sends ``sid``'s keys to a node."""
    try:
        client.get_node_from_key(keys.schedule_keys(sid).meta)  # type: ignore[no-untyped-call]
    except RedisClusterException:
        return False
    return True


def test_the_reaper_reaps_what_its_last_pass_missed_last(cluster: LocalCluster) -> None:
    """Two masters' schedules unserved and due first: the first pass is an outage (two masters failed,
    none reached), and the next reaps the served schedule before them, so its lapsed lease is
    requeued. Before, every pass failed on the same two first and the lease stayed running."""
    down = _on_master(1, "a"), _on_master(2, "b")
    served = _on_master(0, "z")
    delivery = _lapsing(cluster, *down, served)
    requeued = threading.Event()

    def told(report: ReapReport) -> None:
        if report.requeued:
            requeued.set()

    taken = [unserve(cluster, sid) for sid in down]
    reaper = Reaper(delivery, interval_s=0.05, on_reap=told).start()
    try:
        seen = requeued.wait(20.0)
    finally:
        reaper.stop()
        for slot, owner in taken:
            serve(slot, owner)
        serve_everywhere(cluster, *taken[-1])
    assert seen


def test_a_node_saying_the_cluster_is_down_passes_every_schedule_over(cluster: LocalCluster) -> None:
    """Full coverage required (the default): one slot unserved and every node refuses every key, "The
    cluster is down". A walk that has reached nothing raises that at its first failure; one that has
    asks nothing more. Before, it tried a second schedule (0.26 s each) and, having reached one, every
    schedule after."""
    cluster.flushall()
    client = cluster.client()
    others = [_on_master(0, "z"), _on_master(2, "y")]
    for node in cluster.nodes:
        with redis.Redis(port=node.port) as admin:
            admin.config_set("cluster-require-full-coverage", "yes")
    taken = unserve(cluster, _on_master(1, "a"))
    try:
        down = _refused(client, keys.schedule_keys(others[0]).meta)
    finally:
        serve_the_rest(cluster)
        serve_everywhere(cluster, *taken)
    walk = Reach(client)
    with pytest.raises(type(down)):
        walk.missed(others[0], down)
    reached = Reach(client)
    reached.got("done")
    reached.missed(others[0], down)
    assert (reached.passed_over(others[1]), reached.missing[others[1]]) == (True, down)


def _refused(client: redis.RedisCluster, key: str, within_s: float = 20.0) -> Exception:
    """The error reading ``key`` raises once the nodes refuse it (they hear of the unserved slot)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            client.get(key)
        except REDIS_FAILED as error:
            return error
        time.sleep(0.05)
    raise AssertionError(f"{key} still served after {within_s} s")

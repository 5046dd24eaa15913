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
from tests.cluster import (
    SLOTS,
    LocalCluster,
    serve,
    serve_everywhere,
    serve_ranges,
    serve_the_rest,
    unserve,
    unserve_range,
)
from tests.scripts_sent import count_scripts, toward
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
    assert len(unserved) == len(passes)  # each pass: one failed call, the other slot known unserved


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
    sent = count_scripts(client)
    try:
        dropped = [_mapped(client, sid) for sid in (first, second, served)]
        reports = reap_all(Delivery(client), unserved=[])
    finally:
        client.close()
        for slot, owner in taken:
            serve(slot, owner)
        serve_everywhere(cluster, *taken[-1])
    assert dropped == [False, False, True]
    assert served in reports
    assert (toward(sent, {_slot(first)}), toward(sent, {_slot(second)})) == (1, 0)  # the map knows


def test_a_reaper_pass_asks_one_slot_of_a_dropped_range(cluster: LocalCluster) -> None:
    """Five schedules on five slots of a range every master dropped (forgotten, not down), and one
    served: the pass asks the first, learns from the node that refused it which slots no master
    serves, and passes the other four over unasked; the served one is reaped. Before, each of the five
    was a call of 0.26 s (redis-py's fixed wait on a slot not served): ten of them 2.8 s a pass."""
    dropped = range(SLOTS // 3 + 500, SLOTS // 3 + 700)  # the second master's
    ids = _in_range(dropped, 5)
    delivery = _lapsing(cluster, *ids, _on_master(0, "z"))
    owner = delivery.client.get_node_from_key(keys.schedule_keys(ids[0]).meta).port  # type: ignore[union-attr]
    sent = count_scripts(delivery.client)
    reaper = Reaper(delivery, interval_s=60.0)  # one pass, then it waits: stopped before a second
    unserve_range(cluster, dropped)
    try:
        reaper.start()
        _until(lambda: len(sent) > 0)  # its first pass began
        assert reaper.stop(timeout_s=10.0)
    finally:
        serve_ranges(cluster, {dropped: owner})
    assert toward(sent, dropped) == 1
    assert len(sent) > 1  # the served schedule was asked (and the due index read)


def test_two_masters_unserved_ranges_first_are_the_outage_each_asked_once(cluster: LocalCluster) -> None:
    """Two schedules of dropped ranges of two masters due first: each is asked of its own master (a
    node's word on unserved slots counts for its own slots only: review51b), each counts for that
    master, and the pass that has reached nothing is the outage (the two-masters rule: ``reach.py``).
    Before review51b the second was passed over on the first node's word, and counted all the same."""
    first = range(SLOTS // 3 + 500, SLOTS // 3 + 700)  # the second master's
    second = range(2 * SLOTS // 3 + 500, 2 * SLOTS // 3 + 700)  # the third's
    ids = _in_range(first, 1) + _in_range(second, 1, start="b")
    delivery = _lapsing(cluster, *ids, _on_master(0, "z"))
    owners = [delivery.client.get_node_from_key(keys.schedule_keys(s).meta).port for s in ids]  # type: ignore[union-attr]
    sent = count_scripts(delivery.client)
    for slots in (first, second):
        unserve_range(cluster, slots)
    try:
        with pytest.raises(REDIS_FAILED):
            reap_all(delivery)
    finally:
        serve_ranges(cluster, dict(zip((first, second), owners, strict=True)))
    assert (toward(sent, first), toward(sent, second)) == (1, 1)


def test_a_pass_asks_each_master_of_dropped_ranges_once(cluster: LocalCluster) -> None:
    """A served schedule, then three schedules of each of two masters' dropped ranges: the pass asks
    the first of each range, learns from that range's own master which of its slots no master serves,
    and passes the other two of each over unasked; the served one is reaped, no outage."""
    first = range(SLOTS // 3 + 500, SLOTS // 3 + 700)  # the second master's
    second = range(2 * SLOTS // 3 + 500, 2 * SLOTS // 3 + 700)  # the third's
    served = _on_master(0, "z")
    ids = _in_range(first, 3) + _in_range(second, 3, start="b")
    delivery = _lapsing(cluster, served, *ids)
    owners = [delivery.client.get_node_from_key(keys.schedule_keys(s).meta).port for s in (ids[0], ids[3])]  # type: ignore[union-attr]
    sent, unserved = count_scripts(delivery.client), list[Exception]()
    for slots in (first, second):
        unserve_range(cluster, slots)
    try:
        reports = reap_all(delivery, unserved=unserved)
    finally:
        serve_ranges(cluster, dict(zip((first, second), owners, strict=True)))
    assert served in reports
    assert len(unserved) == 2  # each range's master's refusal, told apart
    assert (toward(sent, first), toward(sent, second)) == (1, 1)


def _in_range(slots: range, count: int, start: str = "a") -> list[str]:
    """``count`` ids starting ``start`` on distinct slots of ``slots`` (none of the indexes')."""
    found: dict[int, str] = {}
    for n in range(1_000_000):
        sid = f"{start}{n}"
        if _slot(sid) in slots and _slot(sid) not in INDEXES:
            found.setdefault(_slot(sid), sid)
            if len(found) == count:
                return list(found.values())
    raise AssertionError("no such ids")


def _until(condition: Callable[[], bool], within_s: float = 20.0) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, "never came"
        time.sleep(0.005)


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

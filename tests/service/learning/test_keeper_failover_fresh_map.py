"""The step keeper's first tick after a failover keeps the entries and marks of the failed master's
slots at their new master, on a real 3-master Redis Cluster, where the service's client's own refresh
of its slot map is not due (the tests pace it to an hour, ``paced``: within the second after a read in
production, a window a loaded host's staging overran).

redis-py reads a cluster's map again on an error at most once a second
(``topology_refresh_min_interval``). A master's process gone: a request's call on it fails and reads the
map (the old master still named: the failover has not happened yet); the failover follows within the
second, and the keeper's tick sent each keep to the old master on every try, its refresh not due, and
left them for the next tick, ``PLANNING_MARGIN_S`` / 4 (15 s) later (cluster52, docs/experiments.md).
Now the tick reads the map itself on the first failure of a master (``Unanswered.remapped``) and sends
the key once more, to the new master. ``LocalCluster`` has no replicas: the failover is the slots given
to another master (``CLUSTER SETSLOT ... NODE``, its epoch bumped), as a replica's promotion gives
them, told to both live masters at once (gossip would take up to a second of the window)."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import cast

import pytest
import redis
from redis.crc import key_slot

from service.context import Context
from service.delivery import Delivery, keys
from service.pipeline.step_keeper import Entry, InFlight, Kept, StepKeeper
from service.redis_conn import connect
from service.settings import Settings
from tests.cluster import LocalCluster, serve_the_rest
from tests.scripts_sent import count_scripts
from tests.service.failover import LAST_SHARE, TIMEOUT_S, failed_over, paced
from tests.service.learning.keeper_held import SHORT_MS, left_ms

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    """A cluster of the test's own: it kills a master and moves its slots for good."""
    with LocalCluster() as local:
        serve_the_rest(local)
        yield local


def _on_dead(count: int, key_of: type[Entry] | type[InFlight]) -> list[Kept]:
    """``count`` entries (or marks) of request ``r`` whose slots are in ``LAST_SHARE``."""
    found: list[Kept] = []
    for n in range(100_000):
        each: Kept = Entry(n, "r") if key_of is Entry else InFlight(f"s{n}", "r")
        if key_slot(_key(each).encode()) in LAST_SHARE:
            found.append(each)
        if len(found) == count:
            return found
    raise AssertionError("no keys found on the dead master's slots")


def _key(kept: Kept) -> str:
    """The key ``kept`` is kept on: its step's planning set, or its schedule's slot (``P:planning``'s)."""
    if isinstance(kept, Entry):
        return keys.step_planning(kept.step)
    return keys.schedule_keys(kept.schedule_id).meta


@pytest.mark.parametrize("kind", [Entry, InFlight], ids=["entries", "marks"])
def test_the_first_tick_after_a_failover_keeps_at_the_new_master(
    cluster: LocalCluster, kind: type[Entry] | type[InFlight], driven_keeper: StepKeeper
) -> None:
    delivery = Delivery(
        connect(Settings(redis_url=cluster.url, redis_cluster=True, redis_timeout_s=TIMEOUT_S))
    )
    client = paced(delivery)
    kept = _on_dead(2, kind)
    old = client.get_node_from_key(_key(kept[0])).port  # type: ignore[no-untyped-call]
    dead = next(node for node in cluster.nodes if node.port == old)
    live = [node.port for node in cluster.nodes if node.port != old]  # the first takes its slots
    new = live[0]
    at_new = redis.Redis(port=new, decode_responses=True)
    dead.kill()
    with pytest.raises(redis.ConnectionError):  # a request's call: the client's refresh not due (``paced``)
        client.get(_key(kept[0]))
    failed_over(live, {key_slot(_key(each).encode()) for each in kept})
    written = Delivery(at_new)  # as requests wrote them at the new master
    for each in kept:
        if isinstance(each, Entry):
            written.enter_planning(each.step, each.member, SHORT_MS)
        else:
            written.mark_planning(each.schedule_id, each.request_id, SHORT_MS)
    ctx = cast(Context, SimpleNamespace(delivery=delivery))
    for each in kept:
        driven_keeper.hold(ctx, each, life_s=0.0)
    driven_keeper.tick()
    for each in kept:
        driven_keeper.let_go(each)
    try:
        assert min(left_ms(at_new, each) for each in kept) > SHORT_MS  # pushed to the margin past now
    finally:
        at_new.close()
        client.close()


@pytest.mark.parametrize("refresh", ["paced", "due"])
def test_a_tick_on_a_cluster_wholly_down_reads_the_map_once_and_asks_nothing_more(
    cluster: LocalCluster,
    driven_keeper: StepKeeper,
    refresh: str,
) -> None:
    """Every master's process gone: the first master's pipeline and its first step alone fail, the map
    read again reaches no node, and every other master's entries and every mark are passed over
    unasked. Before the map was read, each master cost its pipeline and a step alone (six calls).

    Read by the tick (``paced``: the client's own refresh not due, ``Unanswered.remapped``), or by the
    client's own retry of that step (``due``: as at every tick in production, 15 s after its last
    read), whose read reaching no node has it raise ``RedisClusterUnreachableError``, not the node's
    ``ConnectionError``: the pass took that for the step's own error and asked every other key, each
    failing the same (12 calls; the test had no ``paced`` and met it at load 25, flaky62)."""
    delivery = Delivery(
        connect(Settings(redis_url=cluster.url, redis_cluster=True, redis_timeout_s=TIMEOUT_S))
    )
    client = paced(delivery)
    if refresh == "due":
        client.nodes_manager._topology_refresh_min_interval = 0.0
    by_master: dict[int, list[Kept]] = {}
    for n in range(10_000):
        port = client.get_node_from_key(keys.step_planning(n)).port  # type: ignore[no-untyped-call]
        if len(by_master.setdefault(port, [])) < 2:
            by_master[port].append(Entry(n, "r"))
    marks: list[Kept] = [InFlight(f"s{n}", "r") for n in range(3)]
    ctx = cast(Context, SimpleNamespace(delivery=delivery))
    for each in [*(e for kept in by_master.values() for e in kept), *marks]:
        driven_keeper.hold(ctx, each, life_s=0.0)
    for node in cluster.nodes:
        node.kill()
    sent = count_scripts(client)
    driven_keeper.tick()
    client.close()
    assert len(sent) == 2  # one master's pipeline, then its first step alone on the client's path

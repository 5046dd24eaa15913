"""Where a key's master did not answer but has not failed over, ``remap.Remap`` costs no more than it
must, on a real 3-master Redis Cluster, counted by the masters themselves (``INFO commandstats``):

* a master that refuses the client's login (its password changed, the client's connections to it
  dropped) is no node down: a call on its key asks no other master about it and reads no map, in a
  pass or alone (``remap.remapped``); every such ask would be refused alike, or, as here, find the
  same master;
* a master that pauses its writes (``CLIENT PAUSE WRITE``, as an old master does while a manual
  failover hands its slots over), the other two down: the pass's read of the map, which only that
  master answers, names it again, so the key is not sent to it once more and no failover is told
  (the INFO line ``remap.py`` writes for one): the call's error is raised after one send's tries.

Both are costs, not outcomes: the key's error is the same either way (mutants53's X1 and X4)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from functools import partial

import pytest
import redis
from redis.cluster import RedisCluster

from service.delivery import Delivery, keys, remap
from service.redis_conn import connect
from service.settings import Settings
from tests.cluster import LocalCluster, serve_the_rest
from tests.service.failover import TIMEOUT_S, answering, map_reads, paced

pytestmark = pytest.mark.slow
KEY = keys.schedule_keys("s0").meta
PAUSE_MS = 600_000  # ended by the test (``CLIENT UNPAUSE``), never by the clock


@pytest.fixture
def cluster() -> Iterator[tuple[LocalCluster, RedisCluster]]:
    """A cluster of the test's own (it changes a master's password, or kills two masters) and the
    service's client on it, its own map refresh paced, its connection to every master made."""
    with LocalCluster() as local:
        serve_the_rest(local)
        settings = Settings(redis_url=local.url, redis_cluster=True, redis_timeout_s=TIMEOUT_S)
        client = paced(Delivery(connect(settings)))
        client.set(KEY, 0)
        for node in client.get_primaries():  # type: ignore[no-untyped-call]
            client.get_redis_connection(node).ping()
        try:
            yield local, client
        finally:
            client.close()


@pytest.mark.parametrize("alone", [True, False], ids=["a call of its own", "a pass"])
def test_a_master_that_refuses_the_login_is_asked_about_by_no_other_master(
    cluster: tuple[LocalCluster, RedisCluster], alone: bool
) -> None:
    local, client = cluster
    port = client.get_node_from_key(KEY).port  # type: ignore[no-untyped-call]
    with redis.Redis(port=port) as node:
        node.config_set("requirepass", "rotated")
        node.execute_command("CLIENT", "KILL", "TYPE", "normal")
    # its refusal waited for: late past the timeout, it read as a silence (``TimeoutError``)
    answering(client, client.get_node_from_key(KEY).name)  # type: ignore[no-untyped-call]
    live = [node.port for node in local.nodes if node.port != port]
    before, cache = map_reads(live), client.nodes_manager.nodes_cache
    get = partial(client.get, KEY)
    call = (
        partial(remap.remapped, client, KEY, get)
        if alone
        else partial(remap.resent, KEY, get, remap.Remap(client).moved)
    )
    with pytest.raises(redis.AuthenticationError):
        call()
    assert map_reads(live) - before == 0
    assert client.nodes_manager.nodes_cache is cache  # no read of the map


def test_a_read_that_names_the_same_master_sends_the_key_no_more_and_tells_no_failover(
    cluster: tuple[LocalCluster, RedisCluster], caplog: pytest.LogCaptureFixture
) -> None:
    """The paused master's node timeout is stretched first: it would otherwise take itself for a
    minority partition two seconds after the kills and answer CLUSTERDOWN, no timeout.

    Its INCR must time out (``TIMEOUT_S``) and the read, on the same node's client, must be answered:
    the read waits for its answer (``answering``) once the INCR has failed, as ``moved`` is called. At
    the 0.25 s a loaded host left the paused master unscheduled past (a probe that stopped it 0.6 s as
    the read was sent), the read reached no node and was counted nowhere: ``assert 0 == 1`` (edges64).
    That the read was answered is asserted, not only counted: read as the cluster down, the rest held."""
    local, client = cluster
    master = client.get_node_from_key(KEY)  # type: ignore[no-untyped-call]
    port, reads = master.port, remap.Remap(client)

    def moved(key: str, error: Exception) -> bool:
        answering(client, master.name)  # the INCR timed out: only the read from here on
        return reads.moved(key, error)

    with redis.Redis(port=port) as node:
        node.config_set("cluster-node-timeout", PAUSE_MS)
        node.config_resetstat()
        node.execute_command("CLIENT", "PAUSE", PAUSE_MS, "WRITE")
    for other in (node for node in local.nodes if node.port != port):
        other.kill()
    try:
        with (
            caplog.at_level(logging.INFO, logger="service.delivery.remap"),
            pytest.raises(redis.TimeoutError),
        ):
            remap.resent(KEY, lambda: client.incr(KEY), moved)
    finally:
        with redis.Redis(port=port) as node:
            node.execute_command("CLIENT", "UNPAUSE")
    assert reads.unreachable is None  # the read was answered: its master named again, not none
    assert map_reads([port]) == 1  # the pass's one read, which only the paused master answered
    assert [r.getMessage() for r in caplog.records if r.name == "service.delivery.remap"] == []

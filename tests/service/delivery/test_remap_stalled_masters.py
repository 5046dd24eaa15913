"""A pass's read of a Redis Cluster's slot map after a master did not answer (``remap.Remap``) is made
only where a master that answers names another master for the key's slot (a failover), on a real
3-master cluster with two masters stalled (SIGSTOPped: they accept and do not answer).

redis-py's read (``NodesManager.initialize``) asks the nodes in a random order, the failed master last:
with two masters stalled it asked the other stalled one first in one read of two and waited out its
socket timeout, a second stall in the pass for a read that found nothing (a stalled master is seldom
failed over yet: cluster53, docs/experiments.md). Now one live master is asked first, and the map read
only where it names a new master. The read replaces the client's map (``nodes_cache``) with a new one:
the map kept is the same object."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from redis.cluster import ClusterNode, RedisCluster

from service.delivery import keys
from service.delivery.remap import Remap, resent
from tests.service.delivery.stalled_pair import two_stalled_masters

pytestmark = pytest.mark.slow


@pytest.fixture
def two_stalled() -> Iterator[tuple[RedisCluster, list[str]]]:
    """Two masters stalled (``stalled_pair``), and a key on each: a schedule's meta."""
    with two_stalled_masters() as (client, on):
        yield client, [keys.schedule_keys(sid).meta for sid in on]


def test_a_stalled_masters_slot_still_its_own_reads_no_map(
    two_stalled: tuple[RedisCluster, list[str]],
) -> None:
    client, on = two_stalled
    kept = client.nodes_manager.nodes_cache
    remap = Remap(client)
    for key in on:  # each stalled master's call times out on every try, then the pass asks
        with pytest.raises(redis.TimeoutError):
            resent(key, lambda key=key: client.get(key), remap.moved)  # type: ignore[misc]
    assert client.nodes_manager.nodes_cache is kept


def test_a_stalled_master_silent_to_the_ask_is_told_once_and_not_asked_again(
    two_stalled: tuple[RedisCluster, list[str]],
) -> None:
    """The ask goes to the masters in the client's order: the other stalled master first, it is told
    to the caller (which passes its keys over) and the live one answers; no later ask of the pass
    goes to either stalled master."""
    client, on = two_stalled
    first, other = (client.get_node_from_key(key) for key in on)  # type: ignore[no-untyped-call]
    live = [node.name for node in client.get_primaries() if node.name not in (first.name, other.name)]  # type: ignore[no-untyped-call]
    for name in [other.name, *live]:  # the client's order: the first stalled master, the other, the live
        client.nodes_manager.move_node_to_end_of_cached_nodes(name)
    told: list[str] = []

    def silent(node: ClusterNode, error: Exception) -> None:
        told.append(str(node.name))

    remap = Remap(client, silent)
    assert not remap.moved(on[0], redis.TimeoutError("the first stalled master's call"))
    assert not remap.moved(on[1], redis.TimeoutError("the other's call"))
    assert told == [other.name]

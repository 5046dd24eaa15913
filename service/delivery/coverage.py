"""Which hash slots of a Redis Cluster no master serves, as one live node sees them: so a walk over
schedules told by a node that one slot is not served passes the other unserved slots over unasked.

A call on a slot no master serves (``cluster-require-full-coverage no``: the node answers "CLUSTERDOWN
Hash slot not served") costs the cluster client 0.25 s before it raises: redis-py waits that long,
fixed in ``RedisCluster._execute_command`` and in its pipeline's retries, for every
``ClusterDownError`` and ``SlotNotCoveredError``, then rebuilds its slot map (measured: 0.26-0.28 s a
call; no client setting changes the wait). The service's clients keep their last full map
(``require_full_coverage``, redis-py's default), so their map still names the old master and cannot
tell such a slot from a served one: a walk paid the wait once per unserved slot it visited (a reaper
pass over ten schedules of a dropped slot range: 2.8 s). One ``CLUSTER SLOTS`` to the node that has
just answered (it is up) tells every slot it knows no master for.

Each ``CLUSTER SLOTS`` goes on the node's own client (``slots_of``), not the cluster client's
``execute_command``: that one first runs any map refresh an earlier failure asked for
(``NodesManager._run_requested_refresh``), which asks the nodes in a random order, a stalled master
the caller has just timed out on among them (another timeout in the same pass: the keeper's test of
two stalled masters failed one run in two on it).
"""

from __future__ import annotations

from collections.abc import Callable, Container
from typing import Any

from redis.cluster import ClusterNode, RedisCluster
from redis.utils import str_if_bytes

from service.delivery.errors import REDIS_FAILED

SLOTS = 16384  # hash slots in every Redis Cluster


def unserved_slots(client: RedisCluster, node: ClusterNode) -> frozenset[int] | None:
    """The slots ``node`` knows no master for (its ``CLUSTER SLOTS``, one call); None where it does not
    answer it (the walk then asks each slot, as before). The node's view: one that has not yet heard of
    a slot served again names it until it does (gossip, a second or so), and the walk that asked passes
    it over once; the next walk asks again."""
    try:
        ranges = slots_of(client, node)
    except REDIS_FAILED:
        return None
    served = bytearray(SLOTS)
    for low, high, _ in ranges:
        served[int(low) : int(high) + 1] = b"\x01" * (int(high) - int(low) + 1)
    return frozenset(slot for slot in range(SLOTS) if not served[slot])


def named_elsewhere(
    client: RedisCluster,
    slot: int,
    node: ClusterNode,
    silent: Container[str] = (),
    on_silent: Callable[[ClusterNode, Exception], None] | None = None,
) -> bool | None:
    """Whether the first other master that answers (its ``CLUSTER SLOTS``, one call on its own client,
    the client's socket timeout once) names a master other than ``node`` for ``slot``: ``node`` did
    not answer and its slot has moved (a failover), which the client's map does not know yet; None
    where no other master answers (``remap.Remap`` then reads the map in a pass, not in a call of its
    own). A node's own client, which a master's pipeline runs on, never re-reads the map, so the step
    keeper stayed on a failed-over stalled master at every tick (review51b). The masters in
    ``silent`` (names: those that did not answer earlier in the caller's pass) are not asked, and one
    that does not answer now is told to ``on_silent`` and the next is asked: asking a second stalled
    master cost a tick a timeout more each (two of three stalled: 1.27 s a tick at a 0.25 s timeout,
    docs51)."""
    primaries: list[ClusterNode] = client.get_primaries()  # type: ignore[no-untyped-call]
    for other in primaries:
        if other.name == node.name or other.name in silent:
            continue
        try:
            ranges = slots_of(client, other)
        except REDIS_FAILED as error:
            if on_silent is not None:
                on_silent(other, error)
            continue
        return _named_elsewhere(ranges, slot, node)
    return None


def slots_of(client: RedisCluster, node: ClusterNode) -> list[tuple[int, int, tuple[str, int]]]:
    """``node``'s ``CLUSTER SLOTS``, asked on its own client (module doc: no map refresh runs first):
    each served range's first and last slot and its master's host and port."""
    raw: list[Any] = client.get_redis_connection(node).execute_command("CLUSTER SLOTS")  # type: ignore[no-untyped-call]
    return [(int(low), int(high), (str_if_bytes(master[0]), int(master[1]))) for low, high, master, *_ in raw]


def _named_elsewhere(ranges: list[tuple[int, int, tuple[str, int]]], slot: int, node: ClusterNode) -> bool:
    """Whether ``ranges`` (``slots_of``) names a master other than ``node`` for ``slot``."""
    for low, high, (host, port) in ranges:
        if low <= slot <= high:
            return (host, port) != (str(node.host), int(node.port))
    return False

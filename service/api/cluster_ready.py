"""Whether a Redis Cluster serves commands at all, as the node ``/readyz`` pings sees it.

A cluster node answers PING while it refuses every other command: with a hash slot no master serves
(a master lost before its replica is promoted, a reshard that dropped one) the cluster's state is
``fail``, and under the default ``cluster-require-full-coverage yes`` each node then answers every
keyed command ``CLUSTERDOWN``, whatever its slot. ``/readyz`` pinged one node and said ready while
each request answered 503. ``CLUSTER INFO`` on that node (its ``cluster_state``) says so, for one
round trip more, only on a cluster.

A cluster whose state stays ``ok`` with a slot unserved (``cluster-require-full-coverage no``: the
operator chose to serve the other slots) stays ready: every replica shares the cluster, so a 503
would take each of them out of the load balancer and end the schedules still served as well; those
of the unserved slot answer 503 ``redis-unavailable`` with ``Retry-After``, request by request.
"""

from __future__ import annotations

from typing import cast

from redis.cluster import ClusterNode, RedisCluster
from redis.crc import REDIS_CLUSTER_HASH_SLOTS
from redis.exceptions import NoPermissionError

from service.redis_conn import RedisClient


def cluster_down(client: RedisClient) -> str | None:
    """Why the cluster refuses commands, as the node PING goes to (the default node) tells it:
    ``cluster_state:fail at <node>, <n> of 16384 slots served``; None when it serves them, on a single
    Redis, or for a user whose ACL does not allow ``CLUSTER INFO`` (PING alone decides, as before)."""
    if not isinstance(client, RedisCluster):
        return None
    try:
        info = client.cluster_info(target_nodes=RedisCluster.DEFAULT_NODE)
    except NoPermissionError:
        return None
    state = info.get("cluster_state", "unknown")
    if state == "ok":
        return None
    node = cast(ClusterNode, client.get_default_node())  # type: ignore[no-untyped-call]
    served = int(info.get("cluster_slots_ok", 0))
    return f"cluster_state:{state} at {node.name}, {served} of {REDIS_CLUSTER_HASH_SLOTS} slots served"

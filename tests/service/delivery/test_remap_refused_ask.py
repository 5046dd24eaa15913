"""A master that refuses an ask's login is no silent master: a call of its own on a client asks it
again within the window (``remap.RECENT_S``) in which the client's calls pass over the masters found
silent, on a real 3-master Redis Cluster.

Why. The masters found silent on a client are passed over by its calls of their own for the window,
each being one socket timeout an ask (``remap._found_silent``, review54). A refusal (its password
changed, an ACL) answers at once, and is credentials, not a node down: the next call's ask may find
the master's answer once the client logs in again, and costs no timeout meanwhile. The asks are
counted as they are sent (``coverage.slots_of``); the window is set, never timed."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest
import redis
from redis.cluster import ClusterNode, RedisCluster

from service.delivery import Delivery, coverage, keys, remap
from service.delivery.errors import NODE_DOWN
from service.redis_conn import connect
from service.settings import Settings
from tests.cluster import LocalCluster, serve_the_rest
from tests.service.failover import TIMEOUT_S, answering, paced

pytestmark = pytest.mark.slow


def test_a_master_that_refused_an_ask_is_asked_again_by_the_next_call_in_the_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two masters killed, the third refusing the client's login: a call on each killed master's key
    asks the third (refused) each time, where a master silent to the first call's ask (the other killed
    one) is asked no more."""
    monkeypatch.setattr(remap, "RECENT_S", 3600.0)
    asked: list[str] = []
    slots_of = coverage.slots_of

    def counted(client: RedisCluster, node: ClusterNode) -> Any:
        asked.append(str(node.name))
        return slots_of(client, node)

    monkeypatch.setattr(coverage, "slots_of", counted)
    with LocalCluster() as local:
        serve_the_rest(local)
        settings = Settings(redis_url=local.url, redis_cluster=True, redis_timeout_s=TIMEOUT_S)
        client = paced(Delivery(connect(settings)))
        try:
            refusing, *down = [str(node.name) for node in client.get_primaries()]  # type: ignore[no-untyped-call]
            calls = [_key_on(client, master) for master in down]
            answering(client, refusing)  # its refusal waited for: a late one is no silence
            for node in local.nodes:
                if f"127.0.0.1:{node.port}" in down:
                    node.kill()
                else:
                    with redis.Redis(port=node.port) as master:
                        master.config_set("requirepass", "rotated")
                        master.execute_command("CLIENT", "KILL", "TYPE", "normal")
            for key in calls:
                with pytest.raises(NODE_DOWN):
                    remap.remapped(client, key, partial(client.get, key))
        finally:
            client.close()
    assert asked == [refusing, down[1], refusing]


def _key_on(client: RedisCluster, master: str) -> str:
    """A schedule's meta key whose slot ``master`` serves in ``client``'s map."""
    return next(
        key
        for key in (keys.schedule_keys(f"s{n}").meta for n in range(100_000))
        if client.get_node_from_key(key).name == master  # type: ignore[no-untyped-call]
    )

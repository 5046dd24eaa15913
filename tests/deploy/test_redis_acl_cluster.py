"""The generated ``--cluster`` users on a Redis Cluster while a slot moves (an operator's reshard).

The loop test never reshards, so a command a cluster client sends only then is refused in
production and nowhere in the loop: redis-py answers an ASK redirect (the key's slot is MIGRATING
and the key already on the importing master, or not written yet) with ``ASKING`` to that master
before the command itself. Both users must hold it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
import typer
from redis.cluster import RedisCluster

from service.delivery.acl import SERVICE, SIDECAR, Role
from tests.cluster import LocalCluster
from tests.deploy.acl_loop import PASSWORDS, apply_lines, generated_lines
from tests.deploy.reshard import Reshard

KEY = "rs:{reshard}:meta"  # a key of one schedule's slot, under the users' prefix


@pytest.fixture(scope="module")
def cluster(cli: typer.Typer) -> Iterator[tuple[LocalCluster, list[redis.Redis]]]:
    """A 3-master cluster of this module's own, with the ``--cluster`` users on every node."""
    lines = generated_lines(cli, "--cluster")
    with LocalCluster() as local:
        admins = [apply_lines(node.port, lines) for node in local.nodes]
        yield local, admins
        for admin in admins:
            admin.close()


@pytest.mark.parametrize("role", [SERVICE, SIDECAR], ids=lambda role: role.name)
def test_a_user_follows_an_ask_redirect_while_its_keys_slot_moves(
    cluster: tuple[LocalCluster, list[redis.Redis]], role: Role
) -> None:
    local, admins = cluster
    password = PASSWORDS[role.password_env]
    client = RedisCluster(
        host="127.0.0.1", port=local.nodes[0].port, username=role.default_user, password=password
    )
    reshard = Reshard.of(local, KEY)
    reshard.open()
    try:
        # Not on the source (never written): the source answers ASK, the client asks the target.
        assert client.get(KEY) is None
        assert [(e["username"], e["object"]) for a in admins for e in a.acl_log()] == []
    finally:
        client.close()
        for node in local.nodes:  # the slot back to its owner: each role's case starts from a stable map
            _node_setslot_stable(node.port, reshard.slot)


def _node_setslot_stable(port: int, slot: int) -> None:
    with redis.Redis(port=port) as node:
        node.execute_command("CLUSTER", "SETSLOT", slot, "STABLE")

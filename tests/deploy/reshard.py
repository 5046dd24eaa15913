"""A hash slot moved between a cluster's masters by hand, step by step, as ``valkey-cli --cluster
reshard`` does: IMPORTING and MIGRATING set, the keys MIGRATEd, the slot assigned to its new master.

The reshard tests and the Redis ACL cluster test (each user of the loop follows an ASK redirect while
a slot is open) open, move and close slots with it, rather than through one test module's private
class, so a change to how a move is driven reaches both.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis
from redis.crc import key_slot

from tests.cluster import LocalCluster


@dataclass(frozen=True)
class Reshard:
    """One slot moving from the master that holds it to another, step by step."""

    cluster: LocalCluster
    slot: int  # the schedule's hash slot
    source: int  # port of the master holding it
    target: int  # port of the master it moves to

    @classmethod
    def of(cls, cluster: LocalCluster, key: str) -> Reshard:
        """The move of ``key``'s slot from its master to the next one."""
        slot = key_slot(key.encode())
        with _node(cluster.nodes[0].port) as client:
            owner = next(int(m[1]) for lo, hi, m, *_ in client.cluster("SLOTS") if lo <= slot <= hi)
        ports = [node.port for node in cluster.nodes]
        return cls(cluster, slot, owner, ports[(ports.index(owner) + 1) % len(ports)])

    def open(self) -> None:
        """IMPORTING on the target, then MIGRATING on the source: the slot is open."""
        with _node(self.target) as target, _node(self.source) as source:
            target.execute_command(
                "CLUSTER", "SETSLOT", self.slot, "IMPORTING", source.execute_command("CLUSTER", "MYID")
            )
            source.execute_command(
                "CLUSTER", "SETSLOT", self.slot, "MIGRATING", target.execute_command("CLUSTER", "MYID")
            )

    def move(self, keys: list[str] | None = None) -> None:
        """MIGRATE ``keys`` (default: every key of the slot still on the source) to the target."""
        with _node(self.source) as source:
            keys = keys or source.execute_command("CLUSTER", "GETKEYSINSLOT", self.slot, 10_000)
            source.execute_command("MIGRATE", "127.0.0.1", self.target, "", 0, 5000, "KEYS", *keys)

    def close(self) -> None:
        """Every master assigns the slot to the target: the move is over."""
        with _node(self.target) as target:
            target_id = target.execute_command("CLUSTER", "MYID")
        for node in self.cluster.nodes:
            with _node(node.port) as client:
                client.execute_command("CLUSTER", "SETSLOT", self.slot, "NODE", target_id)


def _node(port: int) -> redis.Redis:
    return redis.Redis(port=port, decode_responses=True)

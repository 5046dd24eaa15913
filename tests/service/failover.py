"""A failover staged by hand on a real 3-master Redis Cluster (``LocalCluster``, no replicas; its last
master killed or stalled): the service's client with its own map refresh paced, a master's slots given
to a live master, a schedule's keys copied there as a replica holds them, and the slot map's reads
counted. The step keeper's, the heartbeat's, the hand back's, the reports' and the delivery's failover
and remap tests share it, so a change to how a failover is staged reaches them all at once, rather
than through one test module's private names."""

from __future__ import annotations

import time

import redis
from redis.cluster import RedisCluster

from service.delivery import Delivery
from tests.cluster import SLOTS, LocalCluster, slot_of

TIMEOUT_S = 0.25  # the service's client at a short timeout
# how long a test's client waits on a master the test keeps live (``answering``): a bound against a
# master that never answers (a test's own failure), never waited out where the master answers
ANSWER_S = 60.0
# redis-py's ``topology_refresh_min_interval`` (1 s by default: no refresh on an error sooner after one),
# stretched to an hour on the tests' clients (``paced``): a loaded host took over a second between the
# map's read and the walk, whose first try then met a refresh already due, not the case under test
PACED_S = 3600.0
# the last master's share (``valkey-cli --cluster create``): the master the tests kill or stall
LAST_SHARE = range(2 * SLOTS // 3 + 1, SLOTS)
# redis-py re-reads a cluster's map on an error at most once a second after the last read: a client
# built just before the failover would not re-read it at once (the next tick would)
REFRESHED_S = 1.5
Copied = tuple[str, int, bytes]  # a key as ``copied`` reads it: name, ms left (0: none), its DUMP


def paced(delivery: Delivery) -> RedisCluster:
    """``delivery``'s cluster client, its own map refresh on an error paced to ``PACED_S``: only a
    walk's own read (``remap``) can find a failed-over slot's new master within a test."""
    client = delivery.client
    assert isinstance(client, RedisCluster)
    client.nodes_manager._topology_refresh_min_interval = PACED_S
    return client


def answering(client: RedisCluster, *names: str) -> None:
    """``client``'s calls on the masters ``names`` (those the test keeps live) wait for their answer up
    to ``ANSWER_S``, not ``TIMEOUT_S``: the tests tell a stalled master from a live one by whether it
    answers, and a loaded host (2 shared cores, load 20-40) can leave a live valkey-server unscheduled
    past 0.25 s, which read as a silence (its ask passed over, the map read, the next master asked).
    The stalled masters keep ``TIMEOUT_S``, the one wait the tests are about. The client's own settings
    (``connection_kwargs``, which ``remap.silence_s`` reads) are unchanged: only the named masters'
    pools and their open connections are."""
    for node in client.get_primaries():  # type: ignore[no-untyped-call]
        if node.name not in names:
            continue
        pool = node.redis_connection.connection_pool
        pool.connection_kwargs["socket_timeout"] = ANSWER_S
        for connection in [*pool._available_connections, *pool._in_use_connections]:
            connection.socket_timeout = ANSWER_S
            if connection._sock is not None:
                connection._sock.settimeout(ANSWER_S)


def failed_over(live: list[int], slots: set[int]) -> None:
    """``slots`` given to the master at ``live[0]`` (its epoch bumped, so its claim wins), and told to
    every live master at once (gossip would take up to a second of the window under test)."""
    with redis.Redis(port=live[0]) as client:
        me = client.execute_command("CLUSTER", "MYID")
    for port in live:
        with redis.Redis(port=port) as client:
            for slot in slots:
                client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", me)
    with redis.Redis(port=live[0]) as client:
        client.execute_command("CLUSTER", "BUMPEPOCH")


def on_dead() -> str:
    """A schedule id whose slot is in ``LAST_SHARE``: on the master the failover tests kill."""
    return next(f"s{n}" for n in range(100_000) if slot_of(f"s{n}") in LAST_SHARE)


def copied(port: int, slot: int) -> list[Copied]:
    """Every key of ``slot`` at the master on ``port``: what its replica would hold when it fails."""
    with redis.Redis(port=port) as node:
        names = node.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1000)
        return [(name.decode(), max(int(node.pttl(name)), 0), node.dump(name)) for name in names]


def restored(port: int, keys: list[Copied]) -> None:
    """``keys`` written at the master on ``port``, as its replica held them once promoted."""
    with redis.Redis(port=port) as node:
        for name, left_ms, dumped in keys:
            node.restore(name, left_ms, dumped, replace=True)


def map_reads(ports: list[int]) -> int:
    """How many ``CLUSTER SLOTS`` the masters at ``ports`` have answered: how often the clients read
    the slot map, what the remap tests count."""
    total = 0
    for port in ports:
        with redis.Redis(port=port) as node:
            stats = node.info("commandstats")
        total += int(stats.get("cmdstat_cluster|slots", {}).get("calls", 0))
    return total


def moved_around(cluster: LocalCluster, slots: set[int], new: int, live: int) -> None:
    """``slots`` given to ``new`` and seen there by ``live`` (the stalled master hears nothing): a
    failover past a stalled master, waited for until the live master's map names ``new``."""
    with redis.Redis(port=new) as client:
        me = client.execute_command("CLUSTER", "MYID")
        for slot in slots:
            client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", me)
        client.execute_command("CLUSTER", "BUMPEPOCH")
    deadline = time.monotonic() + 30.0
    with redis.Redis(port=live) as client:
        while {int(m[1]) for lo, hi, m, *_ in client.cluster("SLOTS") for s in slots if lo <= s <= hi} != {
            new
        }:
            assert time.monotonic() < deadline, "the move never reached the live master"
            time.sleep(0.05)

"""The sidecar's cluster walks staged on a real Redis Cluster, for the tests of which master a walk asks
and when it reads the slot map: the slots every walk's fixed keys sit on, a schedule's slot, schedules
published oldest first, and a spy on every command the service's cluster client is asked to make. The
learn and two-ranges walk tests share them, so a change to how a walk is staged or watched reaches both,
rather than through one test module's private names."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest
from redis.cluster import RedisCluster
from redis.crc import key_slot

from service.delivery import Delivery, coverage, keys
from tests.cluster import LocalCluster
from tests.service.sidecar.procs import item, publish

# the slots of the keys every walk reads whatever its schedules: never a test's schedule's
FIXED = {key_slot(k.encode()) for k in (keys.active_index(), keys.lapse_index(), keys.inbox("w"))}


class Asked(NamedTuple):
    """One command the client was asked to make: the tests count them by master and by thread."""

    command: str
    slot: int | None  # its key's slot; None for a command with no key (``CLUSTER SLOTS``)
    thread: int  # ``threading.get_ident()`` of the thread that asked


def schedule_slot(sid: str) -> int:
    """The slot of schedule ``sid``'s keys (its meta's hash tag): which master holds it."""
    return key_slot(keys.schedule_keys(sid).meta.encode())


def publish_each(cluster: LocalCluster, ids: list[str]) -> Delivery:
    """Each of ``ids`` published on the emptied ``cluster`` for worker ``w`` with one item, oldest first
    in that order (the walks go oldest first)."""
    cluster.flushall()
    delivery = Delivery(cluster.client())
    for sid in ids:
        publish(delivery, sid, {"w": [item(sid, 0, 5)]}, lease_ttl_ms=60_000)
        time.sleep(0.002)
    return delivery


def cluster_asked(client: RedisCluster, monkeypatch: pytest.MonkeyPatch) -> list[Asked]:
    """From now on, every command ``client`` is asked to make, and every node asked for its slots
    (``coverage.slots_of``, on the node's own client), still sent to the real cluster."""
    asked: list[Asked] = []
    send: Callable[..., Any] = client.execute_command
    slots_of = coverage.slots_of

    def slots_asked(*args: Any) -> Any:
        asked.append(Asked("CLUSTER SLOTS", None, threading.get_ident()))
        return slots_of(*args)

    monkeypatch.setattr(coverage, "slots_of", slots_asked)

    def sent(*args: Any, **options: Any) -> Any:
        name = str(args[0]).upper()
        key = args[3] if name in ("EVAL", "EVALSHA") else args[1] if name == "HMGET" else None
        slot = None if key is None else key_slot(str(key).encode())
        asked.append(Asked(name, slot, threading.get_ident()))
        return send(*args, **options)

    client.execute_command = sent  # type: ignore[method-assign]
    return asked

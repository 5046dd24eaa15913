"""A schedule whose hash slot moves to another master (an operator's reshard) loses nothing.

Every delivery script declares one key, ``P:meta``, and builds the schedule's other keys from it, all
in its slot (docs/delivery.md, "Key layout"). While that slot is open (MIGRATING on its master,
IMPORTING on the next, ``MIGRATE`` moving its keys one by one), the cluster checks each key a script
touches, and refuses one that is not on that node (not moved yet, moved already, or never written) in
the middle of the script, after the writes before it: a claim popped its items off the queue and
never leased them, lost for good; asked of the new master, a claim ran on the part of the schedule
already there and wrote keys that then blocked the move. These tests drive a reshard by hand, as
``valkey-cli --cluster reshard`` does, on a cluster of their own.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pytest
import redis

from service.delivery import CompletionOutcome, Delivery
from tests.cluster import LocalCluster
from tests.deploy.reshard import Reshard
from tests.service.delivery.audit import assert_sound
from tests.service.delivery.conftest import schedule
from tests.service.finished import RESULT


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """A cluster of this module's own: its tests move slots between the masters."""
    with LocalCluster() as local:
        yield local


def _assert_sound(delivery: Delivery, schedule_id: str) -> None:
    """The delivery suite's audit of the raw keys, through the cluster client (single-key reads)."""
    assert_sound(cast(Any, delivery.client), schedule_id)


def test_a_claim_while_its_slot_is_open_writes_nothing_and_its_items_are_claimed_once_it_moved(
    cluster: LocalCluster,
) -> None:
    delivery = Delivery(cluster.client())
    delivery.publish(schedule("open", {"w": 3}))
    delivery.claim("open", "w", 1)  # a schedule in use: its first claim wrote P:seen, P:calls ...
    reshard = Reshard.of(cluster, delivery.keys("open").meta)
    reshard.open()
    with pytest.raises(redis.RedisError):  # refused until the slot settles (the client gave up first)
        delivery.claim("open", "w", 5)
    reshard.move()
    reshard.close()
    assert [lease.key for lease in delivery.claim("open", "w", 5)] == ["w-1#0", "w-2#0"]
    _assert_sound(delivery, "open")


def test_a_step_sent_on_to_the_new_master_before_the_whole_schedule_is_there_waits_for_it(
    cluster: LocalCluster,
) -> None:
    delivery = Delivery(cluster.client())
    delivery.publish(schedule("half", {"w": 2}))
    meta = delivery.keys("half").meta
    reshard = Reshard.of(cluster, meta)
    reshard.open()
    reshard.move([meta])  # the declared key moved first: the client is sent on (ASK) to the target
    with pytest.raises(redis.RedisError):
        delivery.claim("half", "w", 2)
    reshard.move()  # what a step on the target wrote would block this MIGRATE (BUSYKEY)
    reshard.close()
    assert [lease.key for lease in delivery.claim("half", "w", 2)] == ["w-0#0", "w-1#0"]
    _assert_sound(delivery, "half")


def test_complete_and_claim_follows_its_schedule_to_the_master_it_moved_to(cluster: LocalCluster) -> None:
    delivery = Delivery(cluster.client())
    delivery.publish(schedule("moved", {"w": 3}))
    (lease,) = delivery.claim("moved", "w", 1)
    reshard = Reshard.of(cluster, delivery.keys("moved").meta)
    reshard.open()
    reshard.move()
    reshard.close()  # the client's slot map still names the old master: its pipeline is answered MOVED
    outcomes, leases = delivery.complete_and_claim("moved", "w", [(lease.key, lease.token, RESULT)], 1)
    assert (outcomes, [le.key for le in leases]) == ([CompletionOutcome.ACCEPTED], ["w-1#0"])
    _assert_sound(delivery, "moved")

"""What a walk over schedules remembers of the slots and masters that did not answer (``reach.py``):
one failed call per slot or node, not one per schedule, and an outage once it has reached nothing on
two of them. On the real cluster's client (its slot map read from the nodes), and a single Redis's."""

from __future__ import annotations

import pytest
import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import ClusterDownError, TryAgainError

from service.delivery import keys
from service.delivery.reach import Reach


def _slot(schedule_id: str) -> int:
    return key_slot(keys.schedule_keys(schedule_id).meta.encode())


def _node(client: RedisCluster, schedule_id: str) -> str:
    return str(client.get_node_from_key(keys.schedule_keys(schedule_id).meta).name)  # type: ignore[no-untyped-call]


def _ids(count: int) -> list[str]:
    return [f"s{i}" for i in range(count)]


def test_a_schedule_of_a_slot_that_failed_is_passed_over_with_that_slots_error(
    cluster_client: RedisCluster,
) -> None:
    first = "s0"
    same = next(sid for sid in _ids(100_000)[1:] if _slot(sid) == _slot(first))
    node = _node(cluster_client, first)
    other = next(
        sid for sid in _ids(100) if _slot(sid) != _slot(first) and _node(cluster_client, sid) == node
    )
    reach = Reach(cluster_client)
    error = ClusterDownError("Hash slot not served")
    reach.missed(first, error)
    assert (reach.passed_over(same), reach.passed_over(other)) == (True, False)  # its node serves others
    assert (reach.missing, reach.outage()) == ({first: error, same: error}, error)


def test_a_master_not_answering_passes_over_every_schedule_on_it(cluster_client: RedisCluster) -> None:
    first = "s0"
    node = _node(cluster_client, first)
    on_it = next(sid for sid in _ids(100)[1:] if _node(cluster_client, sid) == node)
    elsewhere = next(sid for sid in _ids(100) if _node(cluster_client, sid) != node)
    reach = Reach(cluster_client)
    reach.missed(first, redis.ConnectionError("Connection refused"))
    assert (reach.passed_over(on_it), reach.passed_over(elsewhere)) == (True, False)


def test_two_slots_failed_and_none_reached_is_the_outage_raised(cluster_client: RedisCluster) -> None:
    a, b, c = (
        next(sid for sid in _ids(100) if _node(cluster_client, sid) == n) for n in _nodes(cluster_client)
    )
    reach = Reach(cluster_client)
    reach.missed(a, ClusterDownError("one"))
    with pytest.raises(ClusterDownError, match="two"):
        reach.missed(b, ClusterDownError("two"))
    answered = Reach(cluster_client)
    answered.got(c)
    answered.missed(a, ClusterDownError("one"))
    answered.missed(b, ClusterDownError("two"))  # another slot answered: a walk goes on
    assert (sorted(answered.missing), answered.outage()) == (sorted([a, b]), None)


def test_a_single_redis_connection_error_is_no_one_slots(redis_client: redis.Redis) -> None:
    reach = Reach(redis_client)
    assert redis.ConnectionError not in reach.catches
    assert ClusterDownError in reach.catches  # never raised by one server: caught all the same


def _nodes(client: RedisCluster) -> list[str]:
    return sorted({_node(client, sid) for sid in _ids(100)})


def test_a_schedule_that_answered_then_failed_is_not_reached(redis_client: redis.Redis) -> None:
    """Its settings were read, then its claim failed: the walk reached nothing, an outage, not an
    empty answer (the claim that failed on the only schedule)."""
    reach = Reach(redis_client)
    reach.got("s0")
    error = ClusterDownError("Hash slot not served")
    reach.missed("s0", error)
    assert (reach.reached, reach.outage()) == (False, error)


def test_a_walk_over_no_schedules_is_no_outage(redis_client: redis.Redis) -> None:
    """Nothing reached and nothing missed (an empty inbox, no schedule to reap): nothing to raise."""
    assert Reach(redis_client).outage() is None


def test_a_node_is_asked_which_slots_are_unserved_only_after_it_said_one_is_not_served(
    cluster_client: RedisCluster,
) -> None:
    """A TRYAGAIN (a slot mid-reshard: served, its keys moving) says nothing of unserved slots: no
    ``CLUSTER SLOTS`` is due. A "Hash slot not served" is: due once, and asked (``learn``) no longer due."""
    first, second = "s0", next(sid for sid in _ids(100) if _slot(sid) != _slot("s0"))
    reach = Reach(cluster_client)
    reach.got("reached")  # a walk that reached a schedule: no outage in the way
    reach.missed(first, TryAgainError("TRYAGAIN Multiple keys request during rehashing of slot"))
    assert not reach.unasked
    reach.missed(second, ClusterDownError("Hash slot not served"))
    assert reach.unasked
    reach.learn()
    assert not reach.unasked

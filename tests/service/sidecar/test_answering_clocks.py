"""Since when Redis has answered for a schedule, per answer domain (``service/sidecar/answering.py``):
a domain not heard of runs from the session's start until an outage, an answer starts only a stopped
clock, and an unanswered domain's clock stops. The domains are a single Redis's one, or a cluster's
hash slots."""

from __future__ import annotations

import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot

from service.delivery import Delivery, keys
from service.sidecar.answering import WHOLE, Answering, where_of


def _each_its_own() -> Answering:
    """Every schedule its own domain."""
    return Answering(lambda schedule_id: schedule_id)


def test_a_domain_not_heard_of_answers_from_the_sessions_start_and_an_answer_keeps_that() -> None:
    answering = _each_its_own()
    assert answering.since("a") == 0.0
    answering.answered(["a"], 100.0)
    assert answering.since("a") == 0.0


def test_an_unanswered_domain_stops_alone_and_runs_again_from_its_next_answer() -> None:
    answering = _each_its_own()
    answering.unreachable(["a"])
    assert (answering.since("a"), answering.since("b")) == (None, 0.0)
    answering.answered(["a"], 100.0)
    answering.answered(["a"], 200.0)
    assert answering.since("a") == 100.0


def test_an_outage_stops_every_clock_and_one_not_heard_of_runs_only_once_it_answers() -> None:
    answering = _each_its_own()
    answering.answered(["a"], 50.0)
    answering.unreachable(["b"])
    answering.answered(["b"], 60.0)
    answering.outage()
    assert (answering.since("a"), answering.since("b"), answering.since("c")) == (None, None, None)
    answering.answered(["c"], 70.0)
    assert (answering.since("a"), answering.since("c")) == (None, 70.0)


def test_an_answer_covers_only_the_domains_it_was_for() -> None:
    answering = _each_its_own()
    assert (answering.covers("a", ["a", "b"]), answering.covers("c", ["a", "b"])) == (True, False)


def test_a_single_redis_is_one_domain(redis_client: redis.Redis) -> None:
    where = where_of(Delivery(redis_client))
    assert {where("a"), where("b")} == {WHOLE}


def test_a_clusters_domain_is_the_schedules_hash_slot(cluster_client: RedisCluster) -> None:
    where = where_of(Delivery(cluster_client))
    apart = next(f"s{i}" for i in range(1, 100) if where(f"s{i}") != where("s0"))
    assert where("s0") == key_slot(keys.schedule_keys("s0").meta.encode())
    assert where(apart) != where("s0")

"""Behaviours of the delivery scripts that no other test pinned down: each test here kills a mutant
of service/delivery/lua that the rest of tests/service/delivery let live (docs/experiments.md,
"Mutation check of the core", helper luamutants). Each states what a caller sees, never the Lua."""

from __future__ import annotations

import dataclasses

import redis

from service.delivery import Delivery, LeaseSettings, PublishedSchedule
from tests.service.delivery.conftest import item, schedule


def test_a_reap_cut_short_by_its_limit_asks_to_come_back_at_once_and_the_next_takes_the_rest(
    delivery: Delivery,
) -> None:
    delivery.publish(schedule("s", {"a": 3}, ttl_ms=1_000), now_ms=0)
    delivery.claim("s", "a", 3, now_ms=0)
    first = delivery.reap("s", now_ms=1_001, limit=2)
    assert (first.requeued, first.quiet_until_ms) == (2, 1_001)  # more may have lapsed: due again now
    second = delivery.reap("s", now_ms=1_001, limit=2)
    assert (second.requeued, second.quiet_until_ms) == (1, 2_001)  # the rest, then quiet for a ttl


def test_a_lease_at_its_deadline_and_not_past_it_is_handed_back_refunded_by_a_reset(
    delivery: Delivery,
) -> None:
    delivery.publish(schedule("s", {"a": 1}, ttl_ms=1_000), now_ms=0)
    delivery.claim("s", "a", 1, now_ms=0)  # deadline 1,000: current until then, lapsed only after
    report = delivery.reset("s", "a", age_ms=500, now_ms=1_000)
    assert (report.released, report.requeued_lapsed) == (1, 0)
    (again,) = delivery.claim("s", "a", 1, now_ms=1_000)
    assert again.attempt == 1  # its attempt was refunded, not spent


def test_a_claim_takes_the_part_of_a_group_the_fifo_holds_when_the_rest_sits_on_a_queue(
    delivery: Delivery,
) -> None:
    own = {"a": (), "b": (item("p#1"),)}
    delivery.publish(PublishedSchedule("s", own, shared=(item("p#0"),), prefix_affinity=True))
    assert [le.key for le in delivery.claim("s", "a", 2)] == ["p#0"]
    assert [le.key for le in delivery.claim("s", "b", 2)] == ["p#1"]


def test_every_key_of_a_schedule_with_pins_still_expires_after_a_lapsed_lease_comes_back(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    pinned = dataclasses.replace(item("a-0#0"), pinned=True)
    sched = PublishedSchedule("s", {"a": (pinned, item("a-1#0")), "b": ()}, lease=LeaseSettings(1_000, 3))
    delivery.publish(sched, now_ms=0)
    delivery.claim("s", "a", 2, now_ms=0)  # the queue and its list of stealable items empty: gone
    assert delivery.reap("s", now_ms=1_001).requeued == 2  # both back at the head, and listed again
    lives = {key: redis_client.pttl(key) for key in redis_client.scan_iter(delivery.keys("s").pattern)}
    assert lives
    assert [key for key, ttl in lives.items() if ttl < 0] == []
    assert [le.key for le in delivery.steal("s", "b", 2, now_ms=1_001)] == ["a-1#0"]


def test_a_group_of_more_than_a_thousand_samples_binds_whole_to_the_worker_claiming_its_first(
    delivery: Delivery,
) -> None:
    fifo = (*(item(f"p#{i}") for i in range(1_003)), item("q#0"))
    delivery.publish(PublishedSchedule("s", {"a": (), "b": ()}, shared=fifo, prefix_affinity=True))
    assert [le.key for le in delivery.claim("s", "a", 1)] == ["p#0"]
    assert delivery.progress("s").workers["a"].queued == 1_002  # the rest of p, read past one chunk
    assert [le.key for le in delivery.claim("s", "b", 5)] == ["q#0"]

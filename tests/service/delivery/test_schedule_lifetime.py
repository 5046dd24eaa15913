"""A schedule leaves the indexes once every item settled (however the last one did), keeps its results
until retention, and every key it writes shares one hash slot and expires; an inbox outlives none of it."""

from __future__ import annotations

import time
from dataclasses import replace

import redis
from redis.crc import key_slot

from service.delivery import (
    CompletionOutcome,
    Delivery,
    PublishOutcome,
    ReleaseOutcome,
    keys,
)
from tests.service.delivery.conftest import schedule
from tests.service.finished import RESULT

T0 = 1_000_000  # explicit clock (ms) so expiry is deterministic


def test_a_finished_schedule_leaves_the_indexes_but_keeps_its_results(delivery: Delivery) -> None:
    delivery.publish(schedule("s", {"a": 1, "b": 1}))
    assert delivery.schedules_for("a") == ["s"]
    assert delivery.active_schedules() == ["s"]
    for worker in ("a", "b"):
        (lease,) = delivery.claim("s", worker, 1)
        delivery.complete(lease, RESULT)
    assert delivery.schedules_for("a") == []
    assert delivery.active_schedules() == []
    assert delivery.progress("s").finished
    assert len(delivery.read_results("s")) == 2


def test_a_schedule_whose_last_item_is_dead_lettered_by_fail_leaves_the_indexes(delivery: Delivery) -> None:
    delivery.publish(schedule("s", {"a": 2}, max_attempts=1))
    first, second = delivery.claim("s", "a", 2)
    delivery.complete(first, RESULT)
    assert delivery.fail(second, "engine 500") is ReleaseOutcome.DEAD_LETTERED
    assert delivery.progress("s").finished
    assert (delivery.schedules_for("a"), delivery.active_schedules()) == ([], [])


def test_a_schedule_whose_last_lease_is_reaped_into_the_dead_letters_leaves_the_indexes(
    delivery: Delivery,
) -> None:
    delivery.publish(schedule("s", {"a": 1}, ttl_ms=100, max_attempts=1), now_ms=T0)
    delivery.claim("s", "a", 1, now_ms=T0)
    assert delivery.reap("s", now_ms=T0 + 500).dead_lettered == 1
    assert (delivery.schedules_for("a"), delivery.active_schedules()) == ([], [])


def test_a_heartbeat_that_dead_letters_the_last_lapsed_lease_retires_the_schedule(delivery: Delivery) -> None:
    delivery.publish(schedule("s", {"a": 1}, ttl_ms=100, max_attempts=1), now_ms=T0)
    leases = delivery.claim("s", "a", 1, now_ms=T0)
    assert delivery.heartbeat(leases, now_ms=T0 + 500) == []
    assert (delivery.progress("s").failed, delivery.active_schedules()) == (1, [])


def test_every_key_of_a_schedule_is_in_one_hash_slot_and_expires(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(schedule("s", {"a": 2, "b": 4}, ttl_ms=100, max_attempts=1), now_ms=T0)
    (lease,) = delivery.claim("s", "a", 1, now_ms=T0)
    delivery.complete(lease, RESULT, now_ms=T0)
    delivery.claim("s", "a", 1, now_ms=T0)
    delivery.steal("s", "a", 1, now_ms=T0)
    delivery.reap("s", now_ms=T0 + 500)
    names = [str(n) for n in redis_client.keys(keys.schedule_keys("s").pattern)]
    assert {key_slot(n.encode()) for n in names} == {key_slot(b"s")}
    suffixes = {n.split(":", 2)[2] for n in names}
    # q:a drained and deadlines emptied: both deleted, recreated with the TTL when needed
    expected = {"meta", "items", "prompts", "st", "work", "pace", "counts", "dead", "results", "q:b", "calls"}
    expected.add("seen")  # the claims and steals marked their workers alive
    assert suffixes == expected
    assert all(redis_client.pttl(n) > 0 for n in names)


def test_an_inbox_expires_with_the_schedules_in_it_so_a_departed_worker_leaves_no_key(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    # nothing else would prune the inbox of a worker that never comes back
    published = schedule("s", {"ghost": 1})
    delivery.publish(published)
    ttl_ms = redis_client.pttl("rs:inbox:{ghost}")
    retention_ms = published.lease.retention_s * 1000
    assert retention_ms < ttl_ms <= retention_ms + keys.INBOX_MARGIN_S * 1000


def test_a_schedule_kept_for_less_time_does_not_cut_an_inbox_s_life_short(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(schedule("long", {"w": 1}))
    long_ttl = redis_client.pttl("rs:inbox:{w}")
    short = schedule("short", {"w": 1})
    delivery.publish(replace(short, lease=replace(short.lease, retention_s=60)))
    assert redis_client.pttl("rs:inbox:{w}") > long_ttl - 5_000


def test_replaying_the_publish_of_a_finished_schedule_does_not_announce_it_again(delivery: Delivery) -> None:
    delivery.publish(schedule("s", {"a": 1}))
    (lease,) = delivery.claim("s", "a", 1)
    delivery.complete(lease, RESULT)
    assert delivery.publish(schedule("s", {"a": 1})) is PublishOutcome.UNCHANGED
    assert delivery.schedules_for("a") == []
    assert delivery.active_schedules() == []


def test_an_empty_schedule_is_finished_at_once_and_never_announced(delivery: Delivery) -> None:
    assert delivery.publish(schedule("s", {"a": 0})) is PublishOutcome.CREATED
    assert delivery.progress("s").finished
    assert delivery.schedules_for("a") == []


def test_a_completion_held_past_retention_is_stale_against_its_schedule_id_published_again(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """A pull worker's /done reaches Redis by its token alone (its sidecar may have restarted and
    forgotten the lease), however late. Once the schedule's keys expired and a trainer published the
    same id again, the same key leased to the same worker must not carry the old lease's token."""
    delivery.publish(schedule("s", {"a": 2}))
    (old,) = delivery.claim("s", "a", 1)
    for name in redis_client.keys(keys.schedule_keys("s").pattern):
        redis_client.pexpire(name, 1)  # its retention passed
    time.sleep(0.01)
    assert redis_client.keys(keys.schedule_keys("s").pattern) == []
    assert delivery.publish(schedule("s", {"a": 2})) is PublishOutcome.CREATED
    (new,) = delivery.claim("s", "a", 1)
    assert (new.key, new.worker_id) == (old.key, old.worker_id)
    assert new.token > old.token
    assert delivery.complete_many("s", [(old.key, old.token, RESULT)], worker_id="a") == [
        CompletionOutcome.STALE
    ]
    assert delivery.complete(new, RESULT) is CompletionOutcome.ACCEPTED


def test_an_announce_drops_the_active_entries_from_before_its_retention(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """The reapers' index holds a schedule published long before this one's retention (its keys
    expired, never retired: a publisher gone mid-publish); the next announce prunes it, as it
    prunes each inbox, so the index does not grow by every such schedule for ever. One from within
    the retention stays."""
    active = keys.active_index()
    now_ms = int(time.time() * 1000)
    published = schedule("s", {"w": 1})
    redis_client.zadd(active, {"ancient": 1, "recent": now_ms - 1_000})
    delivery.publish(published)
    assert redis_client.zscore(active, "ancient") is None
    assert redis_client.zscore(active, "recent") is not None
    assert redis_client.zscore(active, "s") is not None

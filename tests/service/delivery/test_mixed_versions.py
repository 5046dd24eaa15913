"""Old and new scripts on one schedule, as while a release rolls (docs/operations.md, "Upgrade and
rollback"): a reaper of the last release point (6ed67cb, its Lua loaded from git beside this
release's) requeues an item by its own rule, a claim of this release pops it by this release's, and
a small-cache thief's steal still never leases one item twice nor splits a group it cannot hold
whole. The same list state is also built by hand, so the rule is checked where git is absent. And a
step the release before ``P:meta``'s ``engine`` publishes (its publish.lua beside this one's) stores
none, which this release's speed learner reads as its own default engine. The publish.lua of the release
before the mark's check, sent this release's arguments, publishes unchecked and reads its call's
nonce as before (this release's script with that release's arguments: test_publish_mark.py)."""

from __future__ import annotations

import dataclasses

import redis

from service.delivery import Delivery, LeaseSettings, PublishedSchedule, PublishOutcome, keys, wire
from service.delivery.keys import schedule_keys
from service.speeds.learner import SpeedLearner
from tests.service.delivery.conftest import item, schedule
from tests.service.delivery.old_release import old_delivery

PRE_ENGINE = "285c6e8"  # the last commit before P:meta's engine: publish.lua took 27 arguments
PRE_MARK = "31a6d28"  # the last commit before publish.lua's mark check: it took 28 arguments
SMALL, TTL_MS = 3_000, 1_000


def _group() -> PublishedSchedule:
    """Group g on 'big': g#0 a SMALL cache holds, g#1 it does not (so the group never moves to it)."""
    short = dataclasses.replace(item("g#0"), max_new_tokens=2_000)
    long = dataclasses.replace(item("g#1"), max_new_tokens=9_000)
    return PublishedSchedule(
        "s",
        {"big": (short, long), "small": ()},
        lease=LeaseSettings(lease_ttl_ms=TTL_MS, max_attempts=5),
        prefix_affinity=True,
        kv_capacity_tokens={"small": SMALL, "big": 100_000},
    )


def _assert_nothing_moved(delivery: Delivery, now: int) -> None:
    progress = delivery.progress("s", now_ms=now)
    assert (progress.queued, progress.running) == (2, 0)
    assert progress.workers["big"].queued == 2


def test_a_steal_never_leases_twice_an_item_an_old_reaper_listed_twice(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    old = old_delivery(redis_client)
    now = 1_000_000
    delivery.publish(_group(), now_ms=now)
    for _ in range(2):  # big's sidecar (upgraded) claims g#0 and dies; an old replica's reaper requeues it
        (lease,) = delivery.claim("s", "big", 1, now_ms=now)
        assert lease.key == "g#0"
        now += TTL_MS + 500
        assert old.reap("s", now_ms=now).requeued == 1
    index = schedule_keys("s").holdable(SMALL, "big")
    assert redis_client.lrange(index, 0, -1) == ["g#0", "g#0"]  # old rule; a claim left one
    now += 5 * TTL_MS  # big has abandoned the group: only its cache held the group back
    assert delivery.steal("s", "small", 4, now_ms=now) == []  # g#1 is too big for small: g stays whole
    _assert_nothing_moved(delivery, now)


def test_a_steal_passes_a_group_its_index_lists_by_one_member_s_own_need(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    now = 1_000_000
    delivery.publish(_group(), now_ms=now)
    for _ in range(2):  # as test above, the entries made by hand: a member listed alone, twice
        delivery.claim("s", "big", 1, now_ms=now)
        now += TTL_MS + 500
        delivery.reap("s", now_ms=now)
        redis_client.lpush(schedule_keys("s").holdable(SMALL, "big"), "g#0")
    now += 5 * TTL_MS
    assert delivery.steal("s", "small", 4, now_ms=now) == []
    _assert_nothing_moved(delivery, now)


def test_a_step_an_older_replica_publishes_stores_no_engine_and_reads_as_the_readers_default(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """Scripts are called by SHA, so an older replica's publish.lua runs beside this release's; it
    stores no engine, this release's republish of the step is a replay that adds none, and a new
    replica's learner prices the step by its own ``ROLLOUT_DEFAULT_ENGINE`` (docs/operations.md)."""
    old = old_delivery(redis_client, PRE_ENGINE)
    step = dataclasses.replace(schedule("s", {"w": 2}), engine="vllm-v1")
    assert old.publish(step, now_ms=1_000_000) == PublishOutcome.CREATED
    assert delivery.publish(step, now_ms=1_000_500) == PublishOutcome.UNCHANGED  # a replay
    meta = schedule_keys("s").meta
    assert redis_client.hget(meta, keys.ENGINE) is None
    assert redis_client.hget(meta, "nonce") not in (None, "vllm-v1")  # its nonce: the last argument
    learner = SpeedLearner(redis_client, 0.2, default_engine="vllm-v0")
    assert learner.planned({"s"}).engines == {"s": "vllm-v0"}
    delivery.publish(dataclasses.replace(step, schedule_id="t"), now_ms=1_000_000)
    assert learner.planned({"t"}).engines == {"t": "vllm-v1"}  # this release's publish stores it


def test_the_script_before_the_mark_s_check_takes_this_release_s_arguments_unchecked(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """Each replica runs its own copy of publish.lua (by SHA): the older one, sent the mark's nonce
    before the call's, publishes with no mark there (it never checked one), stores the call's nonce,
    not the mark's, and answers the same call re-sent 'created' again."""
    old = old_delivery(redis_client, PRE_MARK)
    args = wire.publish_args(schedule("s", {"w": 2}), None, "call-1", mark="lapsed")
    assert not redis_client.exists(schedule_keys("s").planning)
    assert old._call(old.scripts.publish, "s", args) == 1
    assert redis_client.hget(schedule_keys("s").meta, "nonce") == "call-1"
    assert old._call(old.scripts.publish, "s", args) == 1  # re-sent: created, not a replay

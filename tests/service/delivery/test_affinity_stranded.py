"""Under prefix affinity, a started group left on a worker that never comes back still finishes.

A group that has started on a worker stays there (its prefix is in that engine's cache), so a steal
never moves it while its worker may come back for it. But once that worker has stalled (it runs
nothing of the schedule, and the group's last leases lapsed more than a lease TTL ago), the group
moves as a whole to one thief: a dead owner's started group, or a group a dead thief stole, would
otherwise stay queued until the trainer cancels the step. The dead worker's late completions stay
refused. Clocks are pinned (``now_ms``); leases last ``TTL`` ms.
"""

from __future__ import annotations

from collections.abc import Sequence

import redis

from service.delivery import (
    CompletionOutcome,
    Delivery,
    DeliveryItem,
    Lease,
    LeaseSettings,
    PublishedSchedule,
)
from tests.service.delivery.audit import assert_sound
from tests.service.delivery.conftest import item
from tests.service.finished import RESULT

TTL = 10_000


def _group(prompt: str, n: int, predicted: float = 100.0) -> tuple[DeliveryItem, ...]:
    """``n`` samples of one prompt: one prefix-sharing group."""
    return tuple(item(f"{prompt}#{i}", predicted) for i in range(n))


def _publish(delivery: Delivery, queues: dict[str, tuple[DeliveryItem, ...]]) -> None:
    lease = LeaseSettings(lease_ttl_ms=TTL)
    delivery.publish(PublishedSchedule("s", queues, lease=lease, prefix_affinity=True), now_ms=0)


def _keys(leases: Sequence[Lease]) -> list[str]:
    return [lease.key for lease in leases]


def test_a_group_a_dead_thief_stole_moves_whole_to_another_thief(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    _publish(delivery, {"a": (), "b": (), "c": (), "o": _group("q", 3)})
    dead = delivery.steal("s", "a", 4, now_ms=0)  # a takes the whole group q, then dies
    assert _keys(dead) == ["q#0", "q#1", "q#2"]
    delivery.reap("s", now_ms=TTL + 1)  # its leases lapse: q goes back to a's queue, attempts spent
    assert delivery.progress("s", now_ms=TTL + 1).workers["a"].queued == 3
    later = 2 * TTL + 1  # a has taken nothing back for a lease TTL: it is gone
    stolen = delivery.steal("s", "b", 2, now_ms=later)
    assert _keys(stolen) == ["q#0", "q#1"]  # the whole group moves to b: two leased now...
    assert delivery.steal("s", "c", 4, now_ms=later) == []  # ...nothing of it to c
    rest = delivery.claim("s", "b", 4, now_ms=later)
    assert _keys(rest) == ["q#2"]  # ...the third claimed from b's own queue
    for lease in (*stolen, *rest):
        assert lease.attempt == 2
        assert delivery.complete(lease, RESULT, now_ms=later) is CompletionOutcome.ACCEPTED
    assert [delivery.complete(lease, RESULT, now_ms=later) for lease in dead] == [CompletionOutcome.STALE] * 3
    assert delivery.progress("s", now_ms=later).finished
    assert_sound(redis_client, "s")


def test_a_dead_owners_started_group_moves_whole_in_its_order(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    _publish(delivery, {"a": (), "o": _group("q", 3)})
    dead = delivery.claim("s", "o", 2, now_ms=0)  # q#0 and q#1 start on o, which then dies
    delivery.reap("s", now_ms=TTL + 1)
    stolen = delivery.steal("s", "a", 4, now_ms=2 * TTL + 1)
    assert [(lease.key, lease.attempt) for lease in stolen] == [("q#0", 2), ("q#1", 2), ("q#2", 1)]
    assert [delivery.complete(lease, RESULT, now_ms=2 * TTL + 1) for lease in dead] == [
        CompletionOutcome.STALE
    ] * 2
    assert_sound(redis_client, "s")


def test_a_started_group_waits_a_lease_ttl_for_its_worker_to_take_it_back(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    # A worker paused past its lease, or cut off from Redis for a while, comes back to its group and
    # its engine's cache: its lapsed group is not moved at once.
    _publish(delivery, {"a": (), "o": _group("q", 3)})
    delivery.claim("s", "o", 2, now_ms=0)
    delivery.reap("s", now_ms=TTL + 1)
    assert delivery.steal("s", "a", 4, now_ms=2 * TTL) == []  # the lapsed deadline is TTL: not yet
    assert _keys(delivery.claim("s", "o", 4, now_ms=2 * TTL)) == ["q#0", "q#1", "q#2"]
    assert_sound(redis_client, "s")


def test_a_started_group_on_a_worker_still_running_the_schedule_stays(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    # o's engine failed q#0, which went back to o's queue with its attempt spent; o still runs p#0
    # and heartbeats it, so it is alive and will start q again on its own prefix cache.
    _publish(delivery, {"a": (), "o": (*_group("p", 1), *_group("q", 2))})
    running, failed = delivery.claim("s", "o", 2, now_ms=0)
    delivery.fail(failed, "engine error", now_ms=1_000)
    for at in range(5_000, 5 * TTL, 5_000):
        assert delivery.heartbeat([running], now_ms=at)
    assert delivery.steal("s", "a", 4, now_ms=5 * TTL) == []
    assert delivery.progress("s", now_ms=5 * TTL).workers["o"].queued == 2
    assert_sound(redis_client, "s")


def test_the_rest_of_a_group_a_dead_owner_partly_finished_moves_whole(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    # The usual death: o finished part of its group before it died. What is left of the group (all of
    # it on o's queue) moves together; the finished sample is not run again.
    _publish(delivery, {"a": (), "b": (), "o": _group("q", 4)})
    first, second = delivery.claim("s", "o", 2, now_ms=0)
    assert delivery.complete(first, RESULT, now_ms=1_000) is CompletionOutcome.ACCEPTED
    delivery.claim("s", "o", 1, now_ms=1_000)  # q#2 starts in q#0's slot; then o dies
    delivery.reap("s", now_ms=TTL + 1_001)
    later = 2 * TTL + 1_001
    assert _keys(delivery.steal("s", "a", 4, now_ms=later)) == ["q#1", "q#2", "q#3"]
    assert delivery.steal("s", "b", 4, now_ms=later) == []
    assert delivery.complete(second, RESULT, now_ms=later) is CompletionOutcome.STALE
    assert_sound(redis_client, "s")


def test_the_rest_of_a_group_handed_back_on_shutdown_moves_once_its_worker_stays_away(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    # A drained (SIGTERMed) sidecar finishes what runs and hands back the rest of its group,
    # refunding the attempts; a worker that does not come back for it leaves it to a thief.
    _publish(delivery, {"a": (), "o": _group("q", 3)})
    first, second = delivery.claim("s", "o", 2, now_ms=0)
    delivery.release([second], now_ms=1_000)
    assert delivery.complete(first, RESULT, now_ms=2_000) is CompletionOutcome.ACCEPTED
    assert delivery.steal("s", "a", 4, now_ms=TTL + 1_000) == []  # o may still come back for it
    assert _keys(delivery.steal("s", "a", 4, now_ms=2 * TTL + 1)) == ["q#1", "q#2"]
    assert_sound(redis_client, "s")

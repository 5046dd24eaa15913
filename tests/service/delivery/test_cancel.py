"""Cancelling a schedule: the trainer gave up on a step, and the fleet must stop working on it.

Sidecars take schedules oldest first, so a step nobody wants any more would otherwise occupy the
whole fleet before the next one runs.
"""

from __future__ import annotations

import pytest
import redis

from service.delivery import (
    CancelReport,
    CompletionOutcome,
    Delivery,
    PublishedSchedule,
    PublishOutcome,
    ReleaseOutcome,
    ScheduleWithdrawnError,
    UnknownScheduleError,
    keys,
)
from tests.service.delivery.audit import assert_sound, audit
from tests.service.delivery.conftest import item, schedule
from tests.service.finished import RESULT

T0 = 1_000_000  # explicit clock (ms) so expiry is deterministic


def test_cancelling_mid_step_leaves_nothing_queued_or_leased(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(schedule("s", {"a": 4, "b": 3}), now_ms=T0)
    a = delivery.claim("s", "a", 2, now_ms=T0)
    delivery.complete(a[0], RESULT, now_ms=T0 + 1)
    delivery.claim("s", "b", 1, now_ms=T0)

    report = delivery.cancel("s", now_ms=T0 + 2)

    assert report == CancelReport(queued=4, running=2, cancelled_at_ms=T0 + 2)
    assert report.cancelled == 6
    progress = delivery.progress("s")
    assert (progress.queued, progress.running, progress.done, progress.cancelled) == (0, 0, 1, 6)
    assert progress.cancelled_at_ms == T0 + 2
    assert progress.finished
    assert (progress.workers["a"].cancelled, progress.workers["b"].cancelled) == (3, 3)
    k = keys.schedule_keys("s")
    assert [n for n in redis_client.keys(k.pattern) if str(n).startswith(k.queue(""))] == []
    assert redis_client.exists(k.deadlines, k.work) == 0
    assert (audit(redis_client, "s").queued, audit(redis_client, "s").running) == (0, 0)
    assert_sound(redis_client, "s")


def test_after_a_cancel_leases_are_gone_and_late_completions_are_refused(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(schedule("s", {"a": 3}), now_ms=T0)
    first, second, third = delivery.claim("s", "a", 3, now_ms=T0)
    assert delivery.complete(first, RESULT, now_ms=T0 + 1) is CompletionOutcome.ACCEPTED

    delivery.cancel("s", now_ms=T0 + 2)

    assert delivery.heartbeat([second, third], now_ms=T0 + 3) == []  # the sidecar stops them
    assert delivery.complete(second, RESULT, now_ms=T0 + 3) is CompletionOutcome.STALE
    assert delivery.fail(third, "engine error", now_ms=T0 + 3) is ReleaseOutcome.STALE
    assert delivery.release([third], now_ms=T0 + 3) == [ReleaseOutcome.STALE]
    assert delivery.complete(first, RESULT, now_ms=T0 + 3) is CompletionOutcome.DUPLICATE
    assert [r.key for r in delivery.read_results("s")] == [first.key]  # accepted before: kept, once
    assert delivery.reap("s", now_ms=T0 + 10**9).requeued == 0
    assert delivery.progress("s").done == 1
    assert_sound(redis_client, "s")


def test_a_worker_moves_on_to_the_next_schedule_once_the_oldest_is_cancelled(delivery: Delivery) -> None:
    delivery.publish(schedule("old", {"a": 3, "b": 3}), now_ms=T0)
    delivery.publish(schedule("new", {"a": 2, "b": 2}), now_ms=T0 + 1)
    assert delivery.schedules_for("a") == ["old", "new"]

    delivery.cancel("old", now_ms=T0 + 2)

    assert delivery.schedules_for("a") == delivery.schedules_for("b") == ["new"]
    assert delivery.active_schedules() == ["new"]
    # even a worker still walking the old id gets nothing there, by claim or by steal
    assert delivery.claim("old", "a", 5, now_ms=T0 + 3) == []
    assert delivery.steal("old", "a", 5, now_ms=T0 + 3) == []
    assert [le.key for le in delivery.claim("new", "a", 5, now_ms=T0 + 3)] == ["a-0#0", "a-1#0"]


def test_a_second_cancel_changes_nothing_and_answers_the_same(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(schedule("s", {"a": 3}), now_ms=T0)
    delivery.claim("s", "a", 1, now_ms=T0)
    first = delivery.cancel("s", now_ms=T0 + 1)
    before = {k: redis_client.dump(k) for k in redis_client.keys(keys.schedule_keys("s").pattern)}

    assert delivery.cancel("s", now_ms=T0 + 2) == first == CancelReport(2, 1, T0 + 1)
    assert {k: redis_client.dump(k) for k in redis_client.keys(keys.schedule_keys("s").pattern)} == before


def test_cancelling_an_unknown_schedule_raises(delivery: Delivery) -> None:
    with pytest.raises(UnknownScheduleError):
        delivery.cancel("never-published")


def test_a_replayed_publish_does_not_announce_a_cancelled_schedule_again(delivery: Delivery) -> None:
    delivery.publish(schedule("s", {"a": 2}), now_ms=T0)
    delivery.cancel("s", now_ms=T0 + 1)
    assert delivery.publish(schedule("s", {"a": 2}), now_ms=T0 + 2) is PublishOutcome.UNCHANGED
    assert delivery.schedules_for("a") == []
    assert delivery.active_schedules() == []


def test_cancel_empties_the_shared_fifo_and_a_thief_queue_outside_the_plan(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    shared = tuple(item(f"f-{i}#0") for i in range(3))
    delivery.publish(PublishedSchedule("s", {"a": (item("a-0#0"), item("a-1#0"))}, shared=shared), now_ms=T0)
    stolen = delivery.steal("s", "z", 1, now_ms=T0)  # z is in no plan: a lapsed lease of its own
    assert [le.key for le in stolen] == ["a-1#0"]
    delivery.reap("s", now_ms=T0 + 10**6)  # lapsed: back to the head of z's own queue
    assert redis_client.llen(keys.schedule_keys("s").queue("z")) == 1

    assert delivery.cancel("s", now_ms=T0 + 10**6 + 1) == CancelReport(5, 0, T0 + 10**6 + 1)

    k = keys.schedule_keys("s")
    assert redis_client.exists(k.queue("z"), k.queue("a"), k.queue(keys.SHARED_QUEUE)) == 0
    assert delivery.claim("s", "z", 5, now_ms=T0 + 10**6 + 2) == []
    assert_sound(redis_client, "s")


def test_cancelling_a_finished_schedule_cancels_nothing(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(PublishedSchedule("s", {"a": (item("a-0#0"),)}), now_ms=T0)
    (lease,) = delivery.claim("s", "a", 1, now_ms=T0)
    delivery.complete(lease, RESULT, now_ms=T0 + 1)
    assert delivery.cancel("s", now_ms=T0 + 2) == CancelReport(0, 0, T0 + 2)
    assert delivery.progress("s").done == 1
    assert len(delivery.read_results("s")) == 1
    assert_sound(redis_client, "s")


def test_a_repeated_cancel_repairs_a_retire_lost_to_a_crash(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """The script ran but the retire after it did not (the replica died, Redis went away): the
    schedule still stands in the inboxes and the active index, until the trainer's repeat."""
    delivery.publish(schedule("s", {"a": 2, "b": 1}), now_ms=T0)
    first = delivery.cancel("s", now_ms=T0 + 1)
    published = delivery.info("s").published_ms
    for index in (keys.active_index(), keys.inbox("a"), keys.inbox("b")):
        redis_client.zadd(index, {"s": published})  # as the lost retire left them

    assert delivery.cancel("s", now_ms=T0 + 2) == first
    assert delivery.schedules_for("a") == delivery.schedules_for("b") == delivery.active_schedules() == []


def _everything(client: redis.Redis) -> dict[str, tuple[object, int]]:
    """Every key with its content and absolute expiry: a write of any kind shows."""
    return {str(k): (client.dump(k), client.pexpiretime(k)) for k in client.scan_iter("*")}


def test_a_cancel_of_an_id_never_sent_writes_nothing_even_when_asked_to_withdraw(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """A mistyped id is a rejected request: ``UnknownScheduleError``, and no key holds it after."""
    delivery.publish(schedule("s", {"a": 2}), now_ms=T0)
    before = _everything(redis_client)
    with pytest.raises(UnknownScheduleError):
        delivery.cancel("typo", withdraw_s=60)
    assert _everything(redis_client) == before


def test_a_cancel_of_an_id_in_flight_withdraws_it_and_its_publish_is_refused(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """The trainer gave the step up while its request planned it: the cancel answers ``withdrawn``
    (in place of the mark), again when repeated, and the publish that follows writes nothing."""
    delivery.mark_planning("s", "request-1", ttl_ms=60_000)
    report = delivery.cancel("s", withdraw_s=60)
    assert (report.withdrawn, report.cancelled) == (True, 0)
    k = keys.schedule_keys("s")
    assert (redis_client.exists(k.planning), 0 < redis_client.pttl(k.withdrawn) <= 60_000) == (0, True)
    assert delivery.cancel("s", withdraw_s=60) == report
    with pytest.raises(ScheduleWithdrawnError):
        delivery.publish(schedule("s", {"a": 2}), now_ms=T0)
    assert redis_client.exists(k.meta) == 0
    assert delivery.active_schedules() == []


def test_a_request_taking_its_mark_back_leaves_the_mark_of_one_racing_it(delivery: Delivery) -> None:
    """A retry and its first attempt in flight at once: the one refused (503) takes back only its
    own entry, so a DELETE still withdraws the id the other is planning."""
    delivery.mark_planning("s", "first", ttl_ms=60_000)
    delivery.mark_planning("s", "retry", ttl_ms=60_000)
    delivery.unmark_planning("s", "retry")
    assert delivery.cancel("s", withdraw_s=60).withdrawn


def test_the_publish_deletes_every_mark_of_its_id_in_its_own_step(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.mark_planning("s", "first", ttl_ms=60_000)
    delivery.mark_planning("s", "retry", ttl_ms=60_000)
    delivery.publish(schedule("s", {"a": 2}), now_ms=T0)
    assert redis_client.exists(keys.schedule_keys("s").planning) == 0
    assert delivery.cancel("s", now_ms=T0 + 1, withdraw_s=60) == CancelReport(2, 0, T0 + 1)


def test_a_mark_s_lifetime_is_only_ever_extended(delivery: Delivery, redis_client: redis.Redis) -> None:
    """A request with a short budget marking an id after one with a long budget keeps the longer."""
    planning = keys.schedule_keys("s").planning
    delivery.mark_planning("s", "long", ttl_ms=100_000)
    delivery.mark_planning("s", "short", ttl_ms=1_000)
    assert redis_client.pttl(planning) > 50_000
    delivery.mark_planning("s", "longer", ttl_ms=200_000)
    assert redis_client.pttl(planning) > 150_000


def test_a_withdrawal_outlives_every_request_it_met_in_flight(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """A request may wait in line and plan for longer than the retention (the plan queue's timeout
    goes to an hour, the retention down to a minute): the id stays withdrawn at least as long as the
    mark it replaced would have lived, or that request published the abandoned step once the
    withdrawal had lapsed under it."""
    delivery.mark_planning("s", "slow", ttl_ms=3_600_000)
    delivery.cancel("s", withdraw_s=60)
    assert redis_client.pttl(keys.schedule_keys("s").withdrawn) > 3_500_000


def test_a_withdrawal_lasts_the_retention_when_the_mark_would_lapse_sooner(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.mark_planning("s", "quick", ttl_ms=1_000)
    delivery.cancel("s", withdraw_s=60)
    assert 50_000 < redis_client.pttl(keys.schedule_keys("s").withdrawn) <= 60_000


def test_a_refused_request_s_take_back_leaves_the_mark_the_expiry_the_others_gave_it(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """Two requests in flight under one id, a short one and a long one; the long one is refused and
    takes its entry back: the mark lives as long as the short one may, as if the long one had never
    come (before: its extension stayed, 100 s, and a refused request gave a key a later expiry)."""
    planning = keys.schedule_keys("s").planning
    delivery.mark_planning("s", "a", ttl_ms=1_000)
    delivery.mark_planning("s", "b", ttl_ms=100_000)
    delivery.unmark_planning("s", "b")
    assert (redis_client.hlen(planning), 0 < redis_client.pttl(planning) <= 1_000) == (1, True)


def test_a_take_back_keeps_the_latest_deadline_of_the_requests_left(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    planning = keys.schedule_keys("s").planning
    delivery.mark_planning("s", "long", ttl_ms=100_000, now_ms=T0)
    delivery.mark_planning("s", "short", ttl_ms=1_000, now_ms=T0)
    delivery.unmark_planning("s", "short", now_ms=T0 + 500)
    assert 90_000 < redis_client.pttl(planning) <= 100_000


def test_a_take_back_keeps_the_longest_life_left_though_a_shorter_one_came_after_it(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """The latest deadline of every entry left, wherever it sits in the hash: not the last one read
    (mutants60: planning.lua's unmark taking the last entry's deadline survived the test above)."""
    planning = keys.schedule_keys("s").planning
    delivery.mark_planning("s", "long", ttl_ms=100_000, now_ms=T0)
    delivery.mark_planning("s", "short", ttl_ms=1_000, now_ms=T0)
    delivery.mark_planning("s", "refused", ttl_ms=50_000, now_ms=T0)
    delivery.unmark_planning("s", "refused", now_ms=T0 + 500)
    assert sorted(redis_client.hkeys(planning)) == ["long", "short"]
    assert 90_000 < redis_client.pttl(planning) <= 99_500


def test_a_take_back_once_the_others_deadlines_passed_leaves_no_mark(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """The entries left belong to requests past their own lifetime (a replica that died mid-request):
    they lapse as they would have, with the key."""
    delivery.mark_planning("s", "dead", ttl_ms=1_000, now_ms=T0)
    delivery.mark_planning("s", "slow", ttl_ms=100_000, now_ms=T0)
    delivery.unmark_planning("s", "slow", now_ms=T0 + 2_000)
    assert redis_client.exists(keys.schedule_keys("s").planning) == 0


def test_a_take_back_beside_an_older_replica_s_mark_leaves_the_expiry_as_it_is(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """An older replica's entry (when accepted, no deadline of its own) may need the whole TTL."""
    planning = keys.schedule_keys("s").planning
    delivery.mark_planning("s", "new", ttl_ms=100_000)
    redis_client.hset(planning, "old", T0)
    delivery.unmark_planning("s", "new")
    assert 90_000 < redis_client.pttl(planning) <= 100_000


def test_a_take_back_after_the_publish_writes_nothing(delivery: Delivery, redis_client: redis.Redis) -> None:
    delivery.mark_planning("s", "first", ttl_ms=60_000)
    delivery.publish(schedule("s", {"a": 2}), now_ms=T0)
    delivery.unmark_planning("s", "first")
    assert redis_client.exists(keys.schedule_keys("s").planning) == 0

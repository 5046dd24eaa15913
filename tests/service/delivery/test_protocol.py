"""Behaviour of each delivery operation on a real server, one statement per test."""

from __future__ import annotations

from dataclasses import replace

import pytest
import redis

from scheduler.errors import InvalidInputError
from service.delivery import (
    CompletionOutcome,
    Delivery,
    DeliveryItem,
    PublishedSchedule,
    PublishOutcome,
    ReleaseOutcome,
    ScheduleConflictError,
    UnknownScheduleError,
    keys,
    wire,
)
from tests.service.delivery.conftest import item, schedule
from tests.service.finished import RESULT, finished_with

T0 = 1_000_000  # explicit clock (ms) so expiry is deterministic


def test_a_publish_the_client_resends_after_a_timeout_is_still_its_own_creation(delivery: Delivery) -> None:
    # redis-py re-sends a command whose reply timed out (a 65k-item publish blocks Redis ~1 s): the
    # script ran the first time, and the re-sent call must not read as another request's publish
    args = wire.publish_args(schedule("s", {"a": 2}), None, nonce="call-1")
    assert delivery._call(delivery.scripts.publish, "s", args) == 1
    assert delivery._call(delivery.scripts.publish, "s", args) == 1  # the same call, re-sent
    again = wire.publish_args(schedule("s", {"a": 2}), None, nonce="call-2")
    assert delivery._call(delivery.scripts.publish, "s", again) == 0  # another call: a replay


def test_a_replayed_publish_changes_nothing(delivery: Delivery, redis_client: redis.Redis) -> None:
    assert delivery.publish(schedule("s", {"a": 3}), now_ms=T0) is PublishOutcome.CREATED
    delivery.claim("s", "a", 1, now_ms=T0)
    before = {k: redis_client.dump(k) for k in redis_client.keys(keys.schedule_keys("s").pattern)}
    assert delivery.publish(schedule("s", {"a": 3}), now_ms=T0 + 5) is PublishOutcome.UNCHANGED
    assert {k: redis_client.dump(k) for k in redis_client.keys(keys.schedule_keys("s").pattern)} == before


def test_a_different_schedule_under_a_used_id_is_refused(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(schedule("s", {"a": 3}))
    before = {k: redis_client.dump(k) for k in redis_client.keys(keys.schedule_keys("s").pattern)}
    with pytest.raises(ScheduleConflictError):
        delivery.publish(schedule("s", {"a": 4}))
    assert {k: redis_client.dump(k) for k in redis_client.keys(keys.schedule_keys("s").pattern)} == before


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (PublishedSchedule("s", {"a": (item("x#0"), item("x#0"))}), "queues[a].key"),
        (PublishedSchedule("s", {"a": (item("x#0", float("nan")),)}), "queues[a].predicted_tokens"),
        (PublishedSchedule("s{x}", {"a": (item("x#0"),)}), "schedule_id"),
        (PublishedSchedule("s", {"*": (item("x#0"),)}), "queues"),
    ],
)
def test_a_bad_publish_names_the_field_and_writes_nothing(
    delivery: Delivery, redis_client: redis.Redis, bad: PublishedSchedule, field: str
) -> None:
    with pytest.raises(InvalidInputError) as err:
        delivery.publish(bad)
    assert err.value.field == field
    assert redis_client.dbsize() == 0


def test_claims_follow_queue_order_with_increasing_tokens(delivery: Delivery) -> None:
    delivery.publish(schedule("s", {"a": 3, "b": 1}))
    leases = delivery.claim("s", "a", 2) + delivery.claim("s", "a", 5)
    assert [le.key for le in leases] == ["a-0#0", "a-1#0", "a-2#0"]
    assert [le.token for le in leases] == sorted({le.token for le in leases})
    assert all(le.attempt == 1 for le in leases)
    assert delivery.claim("s", "a", 1) == []


def test_claiming_an_unknown_schedule_raises(delivery: Delivery) -> None:
    with pytest.raises(UnknownScheduleError):
        delivery.claim("nope", "a", 1)


def test_a_heartbeat_extends_only_current_leases(delivery: Delivery) -> None:
    delivery.publish(schedule("s", {"a": 2}, ttl_ms=1000), now_ms=T0)
    first, second = delivery.claim("s", "a", 2, now_ms=T0)
    alive = delivery.heartbeat([first, second], now_ms=T0 + 900)
    assert [le.deadline_ms for le in alive] == [T0 + 1900, T0 + 1900]
    assert [le.deadline_ms for le in delivery.heartbeat([first], now_ms=T0 + 1800)] == [T0 + 2800]
    assert delivery.heartbeat([second], now_ms=T0 + 2000) == []  # lapsed at T0+1900: gone, requeued
    assert delivery.progress("s").queued == 1


def test_a_schedule_whose_keys_are_gone_does_not_stop_the_heartbeat_of_the_others(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(schedule("gone", {"a": 1}, ttl_ms=1000), now_ms=T0)
    delivery.publish(schedule("kept", {"a": 1}, ttl_ms=1000), now_ms=T0)
    (old,) = delivery.claim("gone", "a", 1, now_ms=T0)
    (kept,) = delivery.claim("kept", "a", 1, now_ms=T0)
    for key in list(redis_client.scan_iter(match="*gone*")):  # its retention passed; scanned and
        redis_client.delete(key)  # deleted key by key, so the cluster rerun of this test finds them all
    alive = delivery.heartbeat([old, kept], now_ms=T0 + 900)
    assert [(le.schedule_id, le.deadline_ms) for le in alive] == [("kept", T0 + 1900)]


def test_a_completion_is_accepted_once_and_its_repeat_is_a_duplicate(delivery: Delivery) -> None:
    delivery.publish(schedule("s", {"a": 1}))
    (lease,) = delivery.claim("s", "a", 1)
    assert delivery.complete(lease, RESULT) is CompletionOutcome.ACCEPTED
    assert delivery.complete(lease, RESULT) is CompletionOutcome.DUPLICATE
    records = delivery.read_results("s")
    assert [(r.key, r.token, r.worker_id, r.result) for r in records] == [("a-0#0", lease.token, "a", RESULT)]


def test_a_worker_cannot_report_an_item_another_worker_holds(delivery: Delivery) -> None:
    """Tokens count up per schedule, so one alone is easy to guess: the holder is checked too."""
    delivery.publish(schedule("s", {"a": 1, "b": 1}))
    (theirs,) = delivery.claim("s", "b", 1)
    forged = [(theirs.key, theirs.token, RESULT)]
    assert delivery.complete_many("s", forged, worker_id="a") == [CompletionOutcome.STALE]
    assert delivery.read_results("s") == []
    assert delivery.complete(theirs, RESULT) is CompletionOutcome.ACCEPTED  # b's own report stands
    assert delivery.complete_many("s", forged, worker_id="a") == [CompletionOutcome.STALE]  # no echo


def test_a_worker_cannot_extend_release_or_fail_a_lease_another_worker_holds(delivery: Delivery) -> None:
    """As for completions: the token of b's lease in a's name changes nothing and is gone for a."""
    delivery.publish(schedule("s", {"a": 1, "b": 1}, ttl_ms=1000), now_ms=T0)
    (theirs,) = delivery.claim("s", "b", 1, now_ms=T0)
    forged = replace(theirs, worker_id="a")
    assert delivery.heartbeat([forged], now_ms=T0 + 500) == []
    assert delivery.release([forged], now_ms=T0 + 500) == [ReleaseOutcome.STALE]
    assert delivery.fail(forged, "forged", now_ms=T0 + 500) is ReleaseOutcome.STALE
    assert delivery.progress("s").running == 1  # still b's, with its deadline untouched
    assert [le.deadline_ms for le in delivery.heartbeat([theirs], now_ms=T0 + 900)] == [T0 + 1900]


def test_a_stale_completion_is_refused_and_its_result_discarded(delivery: Delivery) -> None:
    delivery.publish(schedule("s", {"a": 1}, ttl_ms=1000), now_ms=T0)
    (old,) = delivery.claim("s", "a", 1, now_ms=T0)
    assert delivery.reap("s", now_ms=T0 + 1001).requeued == 1
    (new,) = delivery.claim("s", "a", 1, now_ms=T0 + 1002)
    assert new.attempt == 2
    assert new.token > old.token
    assert delivery.complete(old, RESULT, now_ms=T0 + 1003) is CompletionOutcome.STALE
    assert delivery.complete(new, RESULT, now_ms=T0 + 1004) is CompletionOutcome.ACCEPTED
    assert delivery.complete(old, RESULT, now_ms=T0 + 1005) is CompletionOutcome.STALE
    assert [r.token for r in delivery.read_results("s")] == [new.token]


def test_a_completion_past_the_deadline_is_stale_even_before_a_reaper_runs(delivery: Delivery) -> None:
    delivery.publish(schedule("s", {"a": 1}, ttl_ms=1000), now_ms=T0)
    (lease,) = delivery.claim("s", "a", 1, now_ms=T0)
    assert delivery.complete(lease, RESULT, now_ms=T0 + 1001) is CompletionOutcome.STALE
    assert delivery.progress("s").queued == 1


def test_release_requeues_at_the_head_in_order_and_refunds_the_attempt(delivery: Delivery) -> None:
    delivery.publish(schedule("s", {"a": 4}))
    leases = delivery.claim("s", "a", 2)
    assert delivery.release(leases) == [ReleaseOutcome.REQUEUED, ReleaseOutcome.REQUEUED]
    again = delivery.claim("s", "a", 4)
    assert [le.key for le in again] == ["a-0#0", "a-1#0", "a-2#0", "a-3#0"]
    assert [le.attempt for le in again] == [1, 1, 1, 1]
    # sent again (its answer lost): taken already, nothing changed (test_release_record.py)
    assert delivery.release(leases) == [ReleaseOutcome.DUPLICATE, ReleaseOutcome.DUPLICATE]
    assert [le.attempt for le in delivery.heartbeat(again)] == [1, 1, 1, 1]


def test_reap_gives_a_holder_its_expired_leases_back_at_the_head_in_claim_order(delivery: Delivery) -> None:
    delivery.publish(schedule("s", {"a": 12}, ttl_ms=100), now_ms=T0)
    delivery.claim("s", "a", 10, now_ms=T0)  # one deadline for all ten: "a-10" sorts before "a-2"
    delivery.claim("s", "a", 1, now_ms=T0 + 5)
    assert delivery.reap("s", now_ms=T0 + 200).requeued == 11
    again = delivery.claim("s", "a", 12, now_ms=T0 + 201)
    assert [le.key for le in again] == [f"a-{i}#0" for i in range(12)]


def test_reap_requeues_at_the_head_and_dead_letters_after_max_attempts(delivery: Delivery) -> None:
    delivery.publish(schedule("s", {"a": 2}, ttl_ms=100, max_attempts=2), now_ms=T0)
    now = T0
    for attempt in (1, 2):
        (lease,) = delivery.claim("s", "a", 1, now_ms=now)
        assert (lease.key, lease.attempt) == ("a-0#0", attempt)
        now += 101
        delivery.reap("s", now_ms=now)
    progress = delivery.progress("s")
    assert (progress.failed, progress.queued, progress.workers["a"].failed) == (1, 1, 1)
    (dead,) = progress.dead_letters
    assert (dead.key, dead.attempts, dead.worker_id) == ("a-0#0", 2, "a")


def test_a_failed_item_is_retried_then_dead_lettered(delivery: Delivery) -> None:
    delivery.publish(schedule("s", {"a": 1}, max_attempts=2))
    (lease,) = delivery.claim("s", "a", 1)
    assert delivery.fail(lease, "engine 500") is ReleaseOutcome.REQUEUED
    (lease,) = delivery.claim("s", "a", 1)
    assert delivery.fail(lease, "engine 500") is ReleaseOutcome.DEAD_LETTERED
    assert delivery.progress("s").dead_letters[0].reason == "engine 500"


def test_a_failure_reported_by_key_and_token_is_charged_as_one_reported_with_its_lease(
    delivery: Delivery,
) -> None:
    """``fail_key`` (a pull worker's /fail of its killed sidecar's lease): retried, then dead-lettered."""
    delivery.publish(schedule("s", {"a": 1}, max_attempts=2))
    (lease,) = delivery.claim("s", "a", 1)
    assert delivery.fail_key("s", "a", lease.key, lease.token, "engine 500") is ReleaseOutcome.REQUEUED
    (again,) = delivery.claim("s", "a", 1)
    assert again.attempt == 2
    assert delivery.fail_key("s", "a", again.key, again.token, "oom") is ReleaseOutcome.DEAD_LETTERED
    repeat = delivery.fail_key("s", "a", again.key, again.token, "oom")  # its answer lost, say
    assert repeat is ReleaseOutcome.DUPLICATE  # taken once: this token's failure recorded (P:failed)
    assert [d.reason for d in delivery.progress("s").dead_letters] == ["oom"]


def test_a_failure_by_key_in_another_workers_name_changes_nothing(delivery: Delivery) -> None:
    delivery.publish(schedule("s", {"a": 1, "b": 1}, ttl_ms=1000), now_ms=T0)
    (theirs,) = delivery.claim("s", "b", 1, now_ms=T0)
    forged = delivery.fail_key("s", "a", theirs.key, theirs.token, "forged", now_ms=T0 + 500)
    assert forged is ReleaseOutcome.STALE
    assert delivery.progress("s").running == 1  # still b's, with its deadline untouched
    assert [le.deadline_ms for le in delivery.heartbeat([theirs], now_ms=T0 + 900)] == [T0 + 1900]


@pytest.mark.parametrize("holder", ["", "a b"])
def test_a_failure_by_key_names_its_holder_or_is_refused_before_anything_is_sent(
    delivery: Delivery, holder: str
) -> None:
    """An empty holder would match any holder in the release script: no id, no failure."""
    delivery.publish(schedule("s", {"a": 1}), now_ms=T0)
    (lease,) = delivery.claim("s", "a", 1, now_ms=T0)
    with pytest.raises(InvalidInputError) as err:
        delivery.fail_key("s", holder, lease.key, lease.token, "engine 500", now_ms=T0 + 1)
    assert err.value.field == "worker_id"
    assert delivery.progress("s").running == 1
    assert delivery.complete(lease, RESULT, now_ms=T0 + 2) is CompletionOutcome.ACCEPTED


def test_a_shared_fifo_feeds_workers_once_their_own_queues_drain(delivery: Delivery) -> None:
    shared = PublishedSchedule("s", {"a": (item("own#0"),), "b": ()}, shared=(item("x#0"), item("y#0")))
    delivery.publish(shared)
    assert [le.key for le in delivery.claim("s", "a", 2)] == ["own#0", "x#0"]
    assert [le.key for le in delivery.claim("s", "b", 2)] == ["y#0"]


def test_complete_and_claim_reports_and_leases_in_one_round_trip(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(schedule("s", {"a": 5}))
    first = delivery.claim("s", "a", 2)
    redis_client.script_flush()  # as after a server restart: both scripts answer NOSCRIPT first
    outcomes, leases = delivery.complete_and_claim("s", "a", [(le.key, le.token, RESULT) for le in first], 2)
    assert outcomes == [CompletionOutcome.ACCEPTED] * 2
    assert [le.key for le in leases] == ["a-2#0", "a-3#0"]
    outcomes, leases = delivery.complete_and_claim("s", "a", [(first[0].key, first[0].token, RESULT)], 9)
    assert outcomes == [CompletionOutcome.DUPLICATE]
    assert [le.key for le in leases] == ["a-4#0"]
    with pytest.raises(UnknownScheduleError):
        delivery.complete_and_claim("nope", "a", [], 1)


def test_a_single_call_after_a_server_restart_loads_its_script_and_runs_once(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(schedule("s", {"a": 3}))
    redis_client.script_flush()  # as after a server restart: the claim's EVALSHA answers NOSCRIPT
    (lease,) = delivery.claim("s", "a", 1)
    redis_client.script_flush()
    assert delivery.complete(lease, RESULT) is CompletionOutcome.ACCEPTED
    assert [le.key for le in delivery.claim("s", "a", 5)] == ["a-1#0", "a-2#0"]  # the first ran once
    assert redis_client.xlen(delivery.keys("s").results) == 1


def test_a_payload_or_result_that_is_not_json_is_refused_and_changes_nothing(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    bad = PublishedSchedule("s", {"a": (DeliveryItem("k#0", "k", 0, 1, 8, 1.0, {"x": float("nan")}),)})
    with pytest.raises(InvalidInputError) as err:
        delivery.publish(bad)
    assert err.value.field == "items[k#0].payload"
    assert redis_client.dbsize() == 0
    delivery.publish(schedule("s", {"a": 1}))
    (lease,) = delivery.claim("s", "a", 1)
    with pytest.raises(InvalidInputError):
        delivery.complete(lease, finished_with(reward=float("inf")))
    assert delivery.complete(lease, RESULT) is CompletionOutcome.ACCEPTED

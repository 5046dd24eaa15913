"""``Delivery.reset``: a worker's restarted process hands back what its predecessor held, and only that.

A push sidecar killed mid-step left its leases running; the process that replaces it under the same
worker id gives them back at start (``service/sidecar/takeover.py``) instead of letting them lapse.
"""

from __future__ import annotations

import time

import redis

from service.delivery import CompletionOutcome, Delivery
from service.delivery.keys import RESET_REFUNDS
from service.delivery.outcomes import ResetReport
from tests.service.delivery.audit import assert_sound
from tests.service.delivery.conftest import schedule
from tests.service.finished import RESULT

T0 = 1_000_000  # explicit clock (ms)
TTL = 10_000


def test_reset_requeues_the_workers_leases_in_claim_order_with_their_attempts_refunded(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(schedule("s", {"a": 4, "b": 2}, ttl_ms=TTL), now_ms=T0)
    held = delivery.claim("s", "a", 3, now_ms=T0)
    (theirs,) = delivery.claim("s", "b", 1, now_ms=T0)
    report = delivery.reset("s", "a", age_ms=500, now_ms=T0 + 1000)  # restarted 0.5 s ago
    assert report == ResetReport(released=3, requeued_lapsed=0, dead_lettered=0)
    progress = delivery.progress("s", now_ms=T0 + 1000)
    assert (progress.workers["a"].queued, progress.workers["a"].running) == (4, 0)
    assert progress.workers["b"].running == 1  # another worker's lease is not touched
    again = delivery.claim("s", "a", 4, now_ms=T0 + 1001)
    assert [le.key for le in again[:3]] == [le.key for le in held]  # head of the queue, plan order
    assert {le.attempt for le in again} == {1}  # no attempt spent on a process that died
    assert delivery.heartbeat([theirs], now_ms=T0 + 1002) != []
    assert_sound(redis_client, "s")


def test_a_reset_sent_again_under_its_call_id_answers_its_first_runs_counts_and_hands_back_nothing_more(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """Its reply lost (Redis cut after running it, redis-py re-sending), a reset ran again found the
    leases gone and answered zeros: the caller never counted what the first run handed back."""
    delivery.publish(schedule("s", {"a": 3}, ttl_ms=TTL), now_ms=T0)
    delivery.claim("s", "a", 2, now_ms=T0)
    first = delivery.reset("s", "a", age_ms=500, now_ms=T0 + 1000, call_id="start-1")
    (mine,) = delivery.claim("s", "a", 1, now_ms=T0 + 1001)  # the caller's own, after the reset
    again = delivery.reset("s", "a", age_ms=0, now_ms=T0 + 5000, call_id="start-1")
    assert first == again == ResetReport(released=2, requeued_lapsed=0, dead_lettered=0)
    assert delivery.heartbeat([mine], now_ms=T0 + 5001) != []  # the replay ended nothing
    assert delivery.reset("s", "a", age_ms=0, now_ms=T0 + 6000, call_id="start-2").handed_back == 1
    assert_sound(redis_client, "s")


def test_the_old_holders_late_completion_is_refused_and_the_item_is_accepted_once(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """A holder that was alive after all (a twin whose presence lapsed) keeps results exactly-once."""
    delivery.publish(schedule("s", {"a": 1}, ttl_ms=TTL), now_ms=T0)
    (old,) = delivery.claim("s", "a", 1, now_ms=T0)
    delivery.reset("s", "a", age_ms=0, now_ms=T0 + 10)
    assert delivery.complete(old, RESULT, now_ms=T0 + 20) is CompletionOutcome.STALE  # still queued
    (new,) = delivery.claim("s", "a", 1, now_ms=T0 + 30)
    assert delivery.complete(old, RESULT, now_ms=T0 + 40) is CompletionOutcome.STALE  # a newer token
    assert delivery.complete(new, RESULT, now_ms=T0 + 50) is CompletionOutcome.ACCEPTED
    assert [r.token for r in delivery.read_results("s")] == [new.token]
    assert_sound(redis_client, "s")


def test_a_lease_taken_or_extended_since_the_callers_start_belongs_to_a_live_process_and_is_kept(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(schedule("s", {"a": 3}, ttl_ms=TTL), now_ms=T0)
    stale, beaten = delivery.claim("s", "a", 2, now_ms=T0)
    delivery.heartbeat([stale, beaten], now_ms=T0 + 4000)  # before the caller started, at T0 + 4500
    delivery.heartbeat([beaten], now_ms=T0 + 4600)  # after: a live holder extended it
    (fresh,) = delivery.claim("s", "a", 1, now_ms=T0 + 4800)  # and one taken since (the caller's own)
    report = delivery.reset("s", "a", age_ms=500, now_ms=T0 + 5000)
    assert report.released == 1
    alive = delivery.heartbeat([stale, beaten, fresh], now_ms=T0 + 5001)
    assert [le.key for le in alive] == [beaten.key, fresh.key]
    assert_sound(redis_client, "s")


def test_a_lease_that_lapsed_already_is_expired_as_the_reaper_would_spending_its_attempt(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(schedule("s", {"a": 2}, ttl_ms=TTL, max_attempts=1), now_ms=T0)
    (lapsed,) = delivery.claim("s", "a", 1, now_ms=T0)
    (current,) = delivery.claim("s", "a", 1, now_ms=T0 + TTL)
    report = delivery.reset("s", "a", age_ms=0, now_ms=T0 + TTL + 1)
    assert report == ResetReport(released=1, requeued_lapsed=0, dead_lettered=1)
    assert [d.key for d in delivery.progress("s", now_ms=T0 + TTL + 1).dead_letters] == [lapsed.key]
    (again,) = delivery.claim("s", "a", 1, now_ms=T0 + TTL + 2)
    assert (again.key, again.attempt) == (current.key, 1)
    assert_sound(redis_client, "s")


def test_a_reset_that_settles_the_schedule_retires_it_from_the_indexes(delivery: Delivery) -> None:
    delivery.publish(schedule("s", {"a": 1}, ttl_ms=TTL, max_attempts=1), now_ms=T0)
    delivery.claim("s", "a", 1, now_ms=T0)
    assert delivery.reset("s", "a", age_ms=0, now_ms=T0 + TTL + 1).dead_lettered == 1
    assert delivery.active_schedules() == []
    assert delivery.schedules_for("a") == []


def _crash_loop(delivery: Delivery, worker: str, rounds: int) -> list[ResetReport]:
    """A worker whose process dies at every run of what it claims: claim, die, restart (reset), again."""
    reports, now = [], T0
    for _ in range(rounds):
        if not delivery.claim("s", worker, 1, now_ms=now):
            break
        now += 100
        reports.append(delivery.reset("s", worker, age_ms=0, now_ms=now))
        now += 100
    return reports


def test_an_item_that_kills_its_sidecar_at_every_run_is_dead_lettered_not_refunded_for_ever(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """A poison trajectory (its run OOMs or crashes the sidecar's pod) is handed back at each restart;
    refunded every time, it came back for ever and the step never finished."""
    attempts = 3
    delivery.publish(schedule("s", {"a": 1}, ttl_ms=TTL, max_attempts=attempts), now_ms=T0)
    reports = _crash_loop(delivery, "a", rounds=4 * (attempts + RESET_REFUNDS))
    assert len(reports) == attempts + RESET_REFUNDS  # the refunded hand-backs, then one per attempt
    assert sum(r.released for r in reports) == RESET_REFUNDS
    assert sum(r.charged for r in reports) == attempts - 1
    assert [r.dead_lettered for r in reports] == [0] * (len(reports) - 1) + [1]
    (dead,) = delivery.progress("s", now_ms=T0).dead_letters
    assert (dead.key, dead.worker_id, dead.attempts) == ("a-0#0", "a", attempts)
    assert dead.reason == (
        f"its sidecar died holding it {len(reports)} times (handed back at each restart), "
        f"after {attempts} attempts"
    )
    assert delivery.active_schedules() == []  # the dead letter settled the step
    assert_sound(redis_client, "s")


def test_a_charged_hand_back_still_goes_to_the_head_of_the_queue_in_claim_order(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(schedule("s", {"a": 4}, ttl_ms=TTL), now_ms=T0)
    for n in range(RESET_REFUNDS + 1):
        held = delivery.claim("s", "a", 2, now_ms=T0 + 10 * n)
        delivery.reset("s", "a", age_ms=0, now_ms=T0 + 10 * n + 5)
    again = delivery.claim("s", "a", 4, now_ms=T0 + 100)
    assert [le.key for le in again[:2]] == [le.key for le in held]
    assert [le.attempt for le in again] == [2, 2, 1, 1]  # the second hand-back spent an attempt
    assert_sound(redis_client, "s")


def test_each_item_has_its_own_refund_a_crash_caused_by_something_else_costs_nothing(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """The count is per item, not per worker: a sidecar killed twice (an unrelated OOM, a node
    restart) while running different items refunds both; only an item held at each death is charged."""
    delivery.publish(schedule("s", {"a": 2}, ttl_ms=TTL, max_attempts=1), now_ms=T0)
    (first,) = delivery.claim("s", "a", 1, now_ms=T0)
    assert delivery.reset("s", "a", age_ms=0, now_ms=T0 + 10).released == 1
    (first,) = delivery.claim("s", "a", 1, now_ms=T0 + 20)
    assert delivery.complete(first, RESULT, now_ms=T0 + 30) is CompletionOutcome.ACCEPTED
    (second,) = delivery.claim("s", "a", 1, now_ms=T0 + 40)
    assert delivery.reset("s", "a", age_ms=0, now_ms=T0 + 50).released == 1  # its first: refunded
    (second,) = delivery.claim("s", "a", 1, now_ms=T0 + 60)
    assert second.attempt == 1
    assert delivery.complete(second, RESULT, now_ms=T0 + 70) is CompletionOutcome.ACCEPTED
    assert delivery.progress("s", now_ms=T0 + 80).dead_letters == ()
    assert_sound(redis_client, "s")


OUTAGE_TTL_MS = 1_000  # the server's clock: an outage's grace is judged on it alone (no now_ms)


def _silence_with_a_restart() -> float:
    """Reach nothing of the schedule for 0.6 TTL (an outage, to the scripts: past half a TTL), the
    worker's new process starting halfway through; when it started (monotonic seconds)."""
    time.sleep(0.3 * OUTAGE_TTL_MS / 1000)
    started = time.monotonic()
    time.sleep(0.3 * OUTAGE_TTL_MS / 1000)
    return started


def _age_ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


def test_a_lease_an_outage_graced_is_handed_back_by_a_process_started_during_the_outage(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """Redis down, the sidecar killed meanwhile and restarted before Redis returned. The first script
    after the silence graces every running lease (deadline a TTL after the return, as if heartbeated:
    docs/delivery.md "Redis outages"), and the reset took that deadline for a live process's: the
    lease was left to lapse a TTL later, attempt spent, instead of coming back at once refunded."""
    delivery.publish(schedule("s", {"a": 2, "b": 1}, ttl_ms=OUTAGE_TTL_MS, max_attempts=1))
    held = delivery.claim("s", "a", 2)
    (theirs,) = delivery.claim("s", "b", 1)
    started = _silence_with_a_restart()
    report = delivery.reset("s", "a", age_ms=_age_ms(started))
    assert report == ResetReport(released=2, requeued_lapsed=0, dead_lettered=0)
    again = delivery.claim("s", "a", 2)
    assert [(le.key, le.attempt) for le in again] == [(le.key, 1) for le in held]
    assert [le.key for le in delivery.heartbeat([theirs])] == [theirs.key]  # another worker's: kept
    assert_sound(redis_client, "s")


def test_a_graced_lease_its_live_holder_heartbeated_since_the_callers_start_is_kept(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """A twin alive through the outage heartbeats after it: the grace says nothing about a holder any
    more, its heartbeat does, and the reset leaves the lease."""
    delivery.publish(schedule("s", {"a": 2}, ttl_ms=OUTAGE_TTL_MS))
    (kept, dropped) = delivery.claim("s", "a", 2)
    started = _silence_with_a_restart()
    assert delivery.heartbeat([kept]) != []  # ends the silence: both graced, this one's mark cleared
    report = delivery.reset("s", "a", age_ms=_age_ms(started))
    assert report == ResetReport(released=1, requeued_lapsed=0, dead_lettered=0)
    assert [le.key for le in delivery.heartbeat([kept, dropped])] == [kept.key]
    assert_sound(redis_client, "s")

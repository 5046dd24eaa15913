"""A drained worker (the request's ``drain: true``, ``PublishedSchedule.drained``) takes nothing of
its schedule by any path: no steal, no claim from the shared FIFO, no failed item's retry, as the
simulator's excluded workers; and it is not announced the schedule. Its sidecar usually still runs
(one drains a worker to take it down, or because it misbehaves), so the protocol itself refuses it.
Drain is not cancel: what it holds of an older schedule it keeps heartbeating and finishing."""

from __future__ import annotations

from dataclasses import replace

import pytest
import redis

from service.delivery import (
    CompletionOutcome,
    Delivery,
    InvalidInputError,
    PublishedSchedule,
    PublishOutcome,
    ReleaseOutcome,
    ScheduleConflictError,
)
from tests.service.delivery.audit import assert_sound
from tests.service.delivery.conftest import item, schedule
from tests.service.finished import RESULT

T0 = 1_000_000  # explicit clock (ms)


def _drained(sizes: dict[str, int], *workers: str, schedule_id: str = "s") -> PublishedSchedule:
    return replace(schedule(schedule_id, sizes), drained=frozenset(workers))


def test_a_drained_worker_steals_nothing_while_an_idle_peer_steals_the_tail(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(_drained({"a": 4, "b": 0, "d": 0}, "d"), now_ms=T0)
    assert delivery.steal("s", "d", 4, now_ms=T0) == []
    assert [le.worker_id for le in delivery.steal("s", "b", 4, now_ms=T0)] == ["b", "b"]
    assert delivery.progress("s").workers["a"].queued == 2
    assert_sound(redis_client, "s")


def test_a_drained_worker_takes_nothing_from_the_shared_queue(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    shared = tuple(item(f"f-{i}#0") for i in range(3))
    published = PublishedSchedule("s", {"a": (), "d": ()}, shared=shared, drained=frozenset({"d"}))
    delivery.publish(published, now_ms=T0)
    assert delivery.claim("s", "d", 3, now_ms=T0) == []
    assert delivery.complete_and_claim("s", "d", [], 3, now_ms=T0) == ([], [])
    assert [le.key for le in delivery.claim("s", "a", 3, now_ms=T0)] == [it.key for it in shared]
    assert_sound(redis_client, "s")


def test_a_failed_item_is_not_retried_on_a_drained_worker_that_polls_idle(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(_drained({"a": 1, "b": 2, "d": 0}, "d"), now_ms=T0)
    assert delivery.claim("s", "d", 1, now_ms=T0) == []  # alive, idle: the least work of all
    delivery.claim("s", "b", 1, now_ms=T0)
    (lease,) = delivery.claim("s", "a", 1, now_ms=T0)
    assert delivery.fail(lease, "bad gpu", now_ms=T0 + 1) is ReleaseOutcome.REQUEUED
    assert delivery.claim("s", "d", 1, now_ms=T0 + 2) == []
    assert delivery.steal("s", "d", 1, now_ms=T0 + 2) == []
    (head,) = delivery.claim("s", "b", 1, now_ms=T0 + 2)
    assert (head.key, head.attempt) == (lease.key, 2)
    assert_sound(redis_client, "s")


def test_with_only_a_drained_worker_left_a_failed_item_goes_back_to_its_holder(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(_drained({"a": 1, "d": 0}, "d"), now_ms=T0)
    assert delivery.claim("s", "d", 1, now_ms=T0) == []
    (lease,) = delivery.claim("s", "a", 1, now_ms=T0)
    delivery.fail(lease, "x", now_ms=T0 + 1)
    assert delivery.steal("s", "d", 1, now_ms=T0 + 2) == []
    (again,) = delivery.claim("s", "a", 1, now_ms=T0 + 2)
    assert (again.key, again.attempt) == (lease.key, 2)
    assert_sound(redis_client, "s")


def test_a_drained_worker_is_not_announced_the_schedule_not_even_by_a_repair(delivery: Delivery) -> None:
    published = _drained({"a": 2, "d": 0}, "d")
    delivery.publish(published, now_ms=T0)
    delivery.announce("s", published.lease.retention_s)  # the retry that repairs a lost announce
    assert (delivery.schedules_for("d"), delivery.schedules_for("a")) == ([], ["s"])
    info = delivery.info("s")
    assert (info.workers, info.drained) == (("a",), ("d",))  # meta 'workers': the announced ones
    assert delivery.progress("s").workers["d"].queued == 0  # still reported on, as planned


def test_an_older_replicas_re_announce_of_a_schedule_that_drains_a_worker_does_not_reach_it(
    delivery: Delivery,
) -> None:
    """A mixed-version roll: a trainer's retry lands on a replica from before drains were stored,
    whose 409 announces the stored schedule to every worker of ``P:meta`` ``workers``, as is."""
    published = _drained({"a": 2, "b": 0, "d": 0}, "d")
    delivery.publish(published, now_ms=T0)
    workers = delivery.info("s").workers
    delivery._announce("s", sorted(workers), published.lease.retention_s)  # that release's announce
    assert (delivery.schedules_for("d"), delivery.schedules_for("b")) == ([], ["s"])
    assert sorted(delivery.progress("s").workers) == ["a", "b", "d"]


def test_a_drained_worker_keeps_finishing_what_it_holds_of_an_older_schedule(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(schedule("old", {"d": 2, "a": 0}), now_ms=T0)
    (held,) = delivery.claim("old", "d", 1, now_ms=T0)
    delivery.publish(_drained({"a": 2, "d": 0}, "d", schedule_id="new"), now_ms=T0 + 1)
    assert delivery.schedules_for("d") == ["old"]
    (alive,) = delivery.heartbeat([held], now_ms=T0 + 2)
    assert delivery.complete(alive, RESULT, now_ms=T0 + 3) is CompletionOutcome.ACCEPTED
    assert [le.worker_id for le in delivery.claim("old", "d", 1, now_ms=T0 + 4)] == ["d"]
    assert delivery.steal("new", "d", 2, now_ms=T0 + 4) == []
    assert_sound(redis_client, "old")
    assert_sound(redis_client, "new")


def test_the_same_schedule_with_another_drain_is_another_schedule(delivery: Delivery) -> None:
    published = _drained({"a": 2, "d": 0}, "d")
    assert delivery.publish(published, now_ms=T0) is PublishOutcome.CREATED
    assert delivery.publish(published, now_ms=T0) is PublishOutcome.UNCHANGED
    with pytest.raises(ScheduleConflictError):
        delivery.publish(replace(published, drained=frozenset()), now_ms=T0)


def test_a_drained_worker_with_queued_work_is_refused(delivery: Delivery) -> None:
    with pytest.raises(InvalidInputError, match="drained worker takes nothing"):
        delivery.publish(_drained({"a": 1, "d": 1}, "d"))
    only_drained = PublishedSchedule("s", {"d": ()}, shared=(item("f#0"),), drained=frozenset({"d"}))
    with pytest.raises(InvalidInputError, match="every worker is drained"):
        delivery.publish(only_drained)


def test_a_drained_worker_polling_throughout_never_takes_an_item_and_all_is_done_once(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    shared = tuple(item(f"f-{i}#0") for i in range(4))
    queues = {"a": tuple(item(f"a-{i}#0") for i in range(6)), "b": (), "d": ()}
    delivery.publish(PublishedSchedule("s", queues, shared=shared, drained=frozenset({"d"})), now_ms=T0)
    now, taken_by_d = T0, 0
    while delivery.progress("s", now_ms=now).done < 10:
        now += 1
        taken_by_d += len(delivery.claim("s", "d", 2, now_ms=now))
        taken_by_d += len(delivery.steal("s", "d", 2, now_ms=now))
        for w in ("a", "b"):
            leases = delivery.claim("s", w, 1, now_ms=now) or delivery.steal("s", w, 1, now_ms=now)
            for lease in leases:
                if lease.attempt == 1 and lease.key.endswith("1#0"):
                    assert delivery.fail(lease, "once", now_ms=now) is ReleaseOutcome.REQUEUED
                else:
                    assert delivery.complete(lease, RESULT, now_ms=now) is CompletionOutcome.ACCEPTED
    assert taken_by_d == 0
    progress = delivery.progress("s", now_ms=now)
    assert (progress.done, progress.workers["d"].done, progress.workers["d"].failed) == (10, 0, 0)
    assert_sound(redis_client, "s")

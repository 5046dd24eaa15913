"""Concurrent thieves, owners and service replicas on one schedule: nothing lost, nothing twice."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Any

import redis

from service.delivery import Delivery, Lease, PublishOutcome, TrajectoryResult
from tests.service.delivery.audit import RecordProperty, audit, report
from tests.service.delivery.concurrency import run_together
from tests.service.delivery.conftest import schedule

RESULT = TrajectoryResult(output_tokens=5)


def test_64_concurrent_thieves_on_one_victim_never_share_an_item(
    redis_client: redis.Redis, redis_url: str, record_property: RecordProperty
) -> None:
    workers = {"victim": 2000, **{f"t{i}": 0 for i in range(64)}}
    Delivery(redis_client).publish(schedule("s", workers))
    leases: list[Lease] = []

    def thief(worker_id: str) -> Callable[[], None]:
        def steal_until_empty() -> None:
            delivery = Delivery.from_url(redis_url)
            while got := delivery.steal("s", worker_id, 8) or delivery.claim("s", worker_id, 8):
                leases.extend(got)
                for lease in got:
                    delivery.complete(lease, RESULT)

        return steal_until_empty

    run_together([thief(w) for w in workers])
    taken = Counter(le.key for le in leases)
    assert (len(taken), max(taken.values())) == (2000, 1)
    assert len({le.worker_id for le in leases}) > 8  # the thieves really raced
    report("64 thieves", audit(redis_client, "s"), record_property)


def _take(into: list[Lease], op: Callable[[str, str, int], list[Lease]], sid: str, worker: str) -> None:
    into.extend(op(sid, worker, 1))


def _reap_each(replica: Delivery, ids: list[str], reaped: list[int]) -> None:
    reaped.extend(replica.reap(sid, now_ms=100).requeued for sid in ids)


def test_owner_and_thief_racing_for_the_last_item_get_it_once(
    redis_client: redis.Redis, redis_url: str, record_property: RecordProperty
) -> None:
    delivery = Delivery(redis_client)
    owner, thief = Delivery.from_url(redis_url), Delivery.from_url(redis_url)
    winners: Counter[str] = Counter()
    for round_ in range(40):
        sid = f"r{round_}"
        delivery.publish(schedule(sid, {"owner": 1, "thief": 0}))
        got: list[Lease] = []
        run_together(
            [
                partial(_take, got, owner.claim, sid, "owner"),
                partial(_take, got, thief.steal, sid, "thief"),
            ]
        )
        assert len(got) == 1
        winners[got[0].worker_id] += 1
        delivery.complete(got[0], RESULT)
        report(f"last-item race {sid}", audit(redis_client, sid), record_property)
    print(f"last-item winners: {dict(winners)}")


def test_two_replicas_publishing_and_reaping_at_once_never_interfere(
    redis_client: redis.Redis, redis_url: str, record_property: RecordProperty
) -> None:
    replicas = [Delivery.from_url(redis_url), Delivery.from_url(redis_url)]
    outcomes: list[PublishOutcome] = []

    def publish_all(replica: Delivery, mine: str) -> Callable[[], None]:
        def run() -> None:
            for i in range(20):
                replica.publish(schedule(f"{mine}{i}", {"a": 10, "b": 10}, ttl_ms=50), now_ms=0)
                outcomes.append(replica.publish(schedule(f"same{i}", {"a": 10}, ttl_ms=50), now_ms=0))

        return run

    run_together([publish_all(replicas[0], "x"), publish_all(replicas[1], "y")])
    assert Counter(outcomes) == {PublishOutcome.CREATED: 20, PublishOutcome.UNCHANGED: 20}
    ids = replicas[0].active_schedules()
    assert len(ids) == 60
    for sid in ids:
        replicas[0].claim(sid, "a", 10, now_ms=0)
    reaped: list[int] = []
    run_together([partial(_reap_each, r, ids, reaped) for r in replicas])
    assert sum(reaped) == 60 * 10  # every expired lease requeued exactly once across both replicas
    for sid in ids:
        result = audit(redis_client, sid)
        assert result.queued == result.total
        report(f"replicas {sid}", result, record_property)


class _ExpiresAfterFirstTouch(redis.Redis):
    """A real client on the real server that makes ``key`` vanish right after the first command that
    names it returns: the schedule's retention passing (or an eviction) at the worst moment."""

    def __init__(self, url: str, key: str) -> None:
        super().__init__(connection_pool=redis.ConnectionPool.from_url(url, decode_responses=True))
        self.key, self.touched = key, False

    def execute_command(self, *args: Any, **options: Any) -> Any:
        answer = super().execute_command(*args, **options)  # type: ignore[no-untyped-call]  # redis-py
        if not self.touched and self.key in args[1:]:
            self.touched = True
            self.delete(self.key)
        return answer


def test_a_request_remembered_as_its_schedule_expires_leaves_no_key_without_expiry(
    redis_client: redis.Redis, redis_url: str
) -> None:
    Delivery(redis_client).publish(schedule("s", {"a": 1}))
    meta = Delivery(redis_client).keys("s").meta
    Delivery(_ExpiresAfterFirstTouch(redis_url, meta)).remember_request("s", "digest")
    assert redis_client.pttl(meta) != -1  # -2: gone, as it should be; -1 would live forever

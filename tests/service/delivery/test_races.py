"""Concurrent thieves, owners and service replicas on one schedule: nothing lost, nothing twice."""

from __future__ import annotations

import hashlib
import threading
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Any

import redis

from service.delivery import CancelReport, Delivery, Lease, PublishOutcome, announcing
from service.delivery.reaper import reap_all
from tests.service.delivery.audit import RecordProperty, audit, report
from tests.service.delivery.concurrency import run_together
from tests.service.delivery.conftest import schedule
from tests.service.finished import RESULT


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


class _CancelledWhileAnnouncing(redis.Redis):
    """A real client whose first run of the announce's opening script (its read of the schedule's
    counts, ``announcing.BEGIN``) is followed at once by another client's cancel: a trainer's DELETE
    landing between a replayed publish's read and its announce."""

    def __init__(self, url: str, schedule_id: str) -> None:
        super().__init__(connection_pool=redis.ConnectionPool.from_url(url, decode_responses=True))
        self.schedule_id, self.report = schedule_id, CancelReport(0, 0, 0)
        self.begin_sha = hashlib.sha1(announcing.BEGIN.encode()).hexdigest()

    def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> Any:
        answer = super().evalsha(sha, numkeys, *keys_and_args)
        if sha == self.begin_sha and not self.report.cancelled_at_ms:  # the race, on a real server
            other = Delivery(redis.Redis(connection_pool=self.connection_pool))
            self.report = other.cancel(self.schedule_id)
        return answer


def test_a_publish_replayed_as_the_schedule_is_cancelled_does_not_announce_it_again(
    delivery: Delivery, redis_url: str
) -> None:
    """Cancelled between the replay's read (not settled yet) and its announce, the schedule must not
    go back in front of the sidecars: the oldest schedule in every inbox, nothing left to claim."""
    delivery.publish(schedule("s", {"a": 2, "b": 1}))
    racing = _CancelledWhileAnnouncing(redis_url, "s")
    assert Delivery(racing).publish(schedule("s", {"a": 2, "b": 1})) is PublishOutcome.UNCHANGED
    assert racing.report.cancelled == 3  # the cancel did land in between
    assert delivery.schedules_for("a") == delivery.schedules_for("b") == delivery.active_schedules() == []


def _busy_worker(url: str, worker_id: str, cancelled: threading.Event, sent: list[tuple[bool, str]]) -> None:
    """Claim or steal, then complete, heartbeat, release or drop each lease in turn (a dropped one
    lapses, for the reapers), until a call after the cancel finds nothing left; ``sent`` records each
    completion's outcome and whether the cancel had already answered when it was sent."""
    delivery, turn = Delivery.from_url(url), 0
    while True:
        after = cancelled.is_set()
        leases = delivery.claim("s", worker_id, 3) or delivery.steal("s", worker_id, 3)
        if not leases and after:
            return
        if not leases:
            time.sleep(0.001)  # all leased: wait for a lapse or a release rather than spin
        for lease in leases:
            turn += 1
            after = cancelled.is_set()
            if turn % 4 == 0:
                delivery.heartbeat([lease])
            elif turn % 4 == 1:
                delivery.release([lease])
            elif turn % 4 == 2:
                sent.append((after, str(delivery.complete(lease, RESULT))))
            # else dropped: the worker "died" on it; its lease lapses and a reaper requeues it


def test_a_cancel_amid_workers_and_reapers_ends_every_item_once_and_accepts_nothing_after(
    redis_client: redis.Redis, redis_url: str, record_property: RecordProperty
) -> None:
    """Reapers requeue lapsed leases, workers claim, steal, release and complete, and the trainer
    cancels in the middle: every item ends done, dead or cancelled, in one place; no completion sent
    after the cancel answered is accepted; the results stream holds exactly the accepted ones."""
    Delivery(redis_client).publish(schedule("s", {f"w{i}": 30 for i in range(4)}, ttl_ms=20, max_attempts=50))
    cancelled, stop_reaping = threading.Event(), threading.Event()
    sent: list[tuple[bool, str]] = []

    def reaper() -> None:
        replica = Delivery.from_url(redis_url)
        while not stop_reaping.is_set():
            reap_all(replica)

    def trainer() -> None:
        trainer_view = Delivery.from_url(redis_url)
        while trainer_view.progress("s").done < 10:
            time.sleep(0.001)
        trainer_view.cancel("s")
        cancelled.set()

    def workers_then_stop() -> None:
        run_together([partial(_busy_worker, redis_url, f"w{i}", cancelled, sent) for i in range(5)])
        stop_reaping.set()

    run_together([reaper, reaper, trainer, workers_then_stop])
    accepted = [after for after, outcome in sent if outcome == "accepted"]
    progress = Delivery(redis_client).progress("s")
    assert (progress.queued, progress.running) == (0, 0)
    assert progress.done + progress.failed + progress.cancelled == progress.total == 120
    assert progress.done == len(accepted) == len(Delivery(redis_client).read_results("s"))
    assert True not in accepted  # sent after the cancel answered: refused
    assert progress.cancelled > 0
    assert Delivery(redis_client).active_schedules() == []
    report("cancel amid workers and reapers", audit(redis_client, "s"), record_property)

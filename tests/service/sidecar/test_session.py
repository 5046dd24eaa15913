"""The worker session against real Redis: what it claims and steals on a sidecar's behalf."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
import redis

from service.delivery.errors import UnknownScheduleError
from service.delivery.outcomes import ReleaseOutcome
from service.delivery.protocol import Delivery
from service.delivery.records import DeliveryItem, PublishedSchedule
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.delivery.proxy import ReplyLosingProxy
from tests.service.finished import RESULT


def _items(worker: str, count: int, predicted: float) -> tuple[DeliveryItem, ...]:
    """Items reserving ``100 + predicted`` KV tokens each."""
    return tuple(
        DeliveryItem(f"{worker}-{i}#0", f"{worker}-{i}", 0, 100, 8192, predicted) for i in range(count)
    )


def test_a_sidecar_steals_only_what_fits_its_kv_cache_beside_what_it_holds(redis_client: redis.Redis) -> None:
    delivery = Delivery(redis_client)
    queues = {"thief": _items("thief", 2, 1900.0), "victim": _items("victim", 12, 900.0)}
    delivery.publish(PublishedSchedule("gate", queues))
    session = WorkerSession(delivery, Holdings(16, kv_capacity_tokens=8000), SessionSettings("thief"))

    own = asyncio.run(session.claim(16))  # its own two items: 4,000 of its 8,000 tokens
    stolen = asyncio.run(session.claim(16))  # 14 free slots, but KV for four 1,000-token items only
    assert [h.lease.key for h in own] == ["thief-0#0", "thief-1#0"]
    assert [h.lease.key for h in stolen] == ["victim-11#0", "victim-10#0", "victim-9#0", "victim-8#0"]
    assert session.stats.stolen == 4
    assert asyncio.run(session.claim(16)) == []  # its cache is spoken for: nothing more is stolen
    assert delivery.progress("gate").workers["victim"].queued == 8


def test_a_schedule_whose_keys_redis_lost_does_not_stop_work_on_the_others(redis_client: redis.Redis) -> None:
    delivery = Delivery(redis_client)
    delivery.publish(PublishedSchedule("lost", {"w": _items("a", 2, 100.0)}), now_ms=1)
    delivery.publish(PublishedSchedule("intact", {"w": _items("b", 2, 100.0)}), now_ms=2)
    redis_client.delete(delivery.keys("lost").st)  # an eviction under allkeys-lru
    session = WorkerSession(delivery, Holdings(16), SessionSettings("w"))
    claimed = asyncio.run(session.claim(16))
    assert [h.lease.key for h in claimed] == ["b-0#0", "b-1#0"]


def test_a_failover_in_progress_is_an_outage_to_wait_out_not_a_damaged_schedule(
    redis_client: redis.Redis,
) -> None:
    """A node turned replica refuses the claim script's writes (READONLY): not this schedule's fault."""
    delivery = Delivery(redis_client)
    delivery.publish(PublishedSchedule("failover", {"w": _items("a", 2, 100.0)}))
    session = WorkerSession(delivery, Holdings(16), SessionSettings("w"))
    redis_client.replicaof("127.0.0.1", 1)  # a master that is not there (yet)
    try:
        with pytest.raises(redis.exceptions.ReadOnlyError):
            asyncio.run(session.claim(16))
    finally:
        redis_client.replicaof("NO", "ONE")
    assert [h.lease.key for h in asyncio.run(session.claim(16))] == ["a-0#0", "a-1#0"]  # not written off


def test_a_claim_whose_reply_was_lost_is_answered_on_the_next_claim(redis_client: redis.Redis) -> None:
    """The claim ran, its reply never came (a timeout, a cut connection): the sidecar's next claim
    gets those leases back rather than new ones, so none lapses unseen at the cost of an attempt."""
    Delivery(redis_client).publish(PublishedSchedule("lost-reply", {"w": _items("a", 4, 100.0)}))
    assert Delivery(redis_client).claim("lost-reply", "idle", 1) == []  # script loaded on the server
    proxy = ReplyLosingProxy(int(redis_client.connection_pool.connection_kwargs["port"]))
    lossy = Delivery(redis.Redis.from_url(proxy.url, decode_responses=True, retry=None))
    session = WorkerSession(lossy, Holdings(2), SessionSettings("w", steal=False))
    try:
        asyncio.run(session.schedules())  # its settings read: a claim's next read is the inbox
        proxy.lose_next_reply(after=1)  # the claim's reply, after the inbox read's
        with pytest.raises(redis.ConnectionError):
            asyncio.run(session.claim(2))
        claimed = asyncio.run(session.claim(2))
    finally:
        proxy.close()
    assert [h.lease.key for h in claimed] == ["a-0#0", "a-1#0"]
    progress = Delivery(redis_client).progress("lost-reply")
    assert (progress.running, progress.queued) == (2, 2)


def test_a_failure_report_the_protocol_refuses_counts_as_stale_or_cancelled_not_as_a_failure(
    redis_client: redis.Redis,
) -> None:
    """A fail of a lease already gone changed nothing in Redis: counted ``failed``, it made a worker
    look as if its engine refused items. It is counted as a refused completion is: ``stale``, or
    ``cancelled`` when the trainer cancelled the schedule; only a fail the server took is a failure."""
    delivery = Delivery(redis_client)
    for sid in ("live", "lapsed", "cancelled"):
        delivery.publish(PublishedSchedule(sid, {"w": _items(sid, 1, 100.0)}))
    session = WorkerSession(delivery, Holdings(16), SessionSettings("w", steal=False))
    held = {h.lease.schedule_id: h for h in asyncio.run(session.claim(16))}
    assert sorted(held) == ["cancelled", "lapsed", "live"]
    far_ms = int(time.time() * 1000) + 3_600_000
    assert delivery.reap("lapsed", now_ms=far_ms).requeued == 1  # its lease lapsed and was reaped
    delivery.cancel("cancelled")

    outcomes = [asyncio.run(session.fail(held[sid], "engine refused it")) for sid in sorted(held)]
    assert outcomes == [ReleaseOutcome.STALE, ReleaseOutcome.STALE, ReleaseOutcome.REQUEUED]
    stats = session.stats
    assert (stats.failed, stats.stale, stats.cancelled) == (1, 1, 1)
    assert len(session.holdings) == 0


def test_a_hand_back_whose_time_is_spent_still_gets_its_leases_back_to_the_queue(
    redis_client: redis.Redis,
) -> None:
    """A drain that used all its time (``within_s`` zero or past) still hands back what it holds, given
    a tenth of a second: else items never started sat leased, nobody running them, until they lapsed."""
    delivery = Delivery(redis_client)
    delivery.publish(PublishedSchedule("spent", {"w": _items("a", 3, 100.0)}))
    session = WorkerSession(delivery, Holdings(16), SessionSettings("w"))
    claimed = asyncio.run(session.claim(16))
    assert delivery.progress("spent").workers["w"].queued == 0
    asyncio.run(session.hand_back(claimed, within_s=-5.0))
    assert session.stats.released == 3
    assert delivery.progress("spent").workers["w"].queued == 3
    assert len(session.holdings) == 0


def test_a_hand_back_waits_for_a_slow_redis_within_the_time_it_is_given(redis_client: redis.Redis) -> None:
    """Given seconds, a hand-back waits a Redis that answers late (here paused 0.5 s) and counts what
    went back; only a drain whose time is spent is cut to the floor of a tenth of a second."""
    delivery = Delivery(redis_client)
    delivery.publish(PublishedSchedule("slow", {"w": _items("a", 3, 100.0)}))
    session = WorkerSession(delivery, Holdings(16), SessionSettings("w"))
    claimed = asyncio.run(session.claim(16))
    redis_client.client_pause(500, all=False)  # writes wait half a second
    asyncio.run(session.hand_back(claimed, within_s=30.0))
    assert session.stats.released == 3
    assert delivery.progress("slow").workers["w"].queued == 3


def test_a_completion_in_a_schedule_gone_from_redis_forgets_its_lease_and_counts_it_stale(
    redis_client: redis.Redis,
) -> None:
    """Nothing will take the result or run the item again (its keys are gone): the lease ends here, else
    the heartbeats would carry it for ever and the pull API keep listing it."""
    delivery = Delivery(redis_client)
    delivery.publish(PublishedSchedule("gone", {"w": _items("a", 1, 100.0)}))
    session = WorkerSession(delivery, Holdings(16), SessionSettings("w"))
    (held,) = asyncio.run(session.claim(16))
    redis_client.delete(*redis_client.keys("*gone*"))  # its retention passed while it ran
    with pytest.raises(UnknownScheduleError):
        asyncio.run(session.complete(held, RESULT, keep_unanswered=True))
    assert len(session.holdings) == 0
    assert (session.stats.stale, session.stats.accepted) == (1, 0)


def test_a_schedule_whose_keys_redis_lost_is_told_once_as_damaged_however_often_it_is_claimed_from(
    redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    delivery = Delivery(redis_client)
    delivery.publish(PublishedSchedule("evicted", {"w": _items("a", 2, 100.0)}))
    redis_client.delete(delivery.keys("evicted").st)  # an eviction under allkeys-lru
    session = WorkerSession(delivery, Holdings(16), SessionSettings("w"))
    with caplog.at_level(logging.ERROR, logger="service.sidecar"):
        for _ in range(3):
            assert asyncio.run(session.claim(16)) == []
    damaged = [r for r in caplog.records if "schedule evicted is damaged in Redis" in r.getMessage()]
    assert len(damaged) == 1


def test_what_the_claims_kept_for_a_schedule_found_gone_goes_with_it(redis_client: redis.Redis) -> None:
    """A schedule whose keys went (its retention passed while the inbox still named it, or while its
    master did not answer and the claims walked the known: ``inbox.py``): the claim that finds it gone
    forgets what it kept for it, the call id of the claim that raised among it. Only its settings were
    dropped: the inbox's next answer, the one place that forgot the rest, no longer saw it known, and a
    long-lived sidecar kept a call id for every such schedule (review65)."""
    delivery = Delivery(redis_client)
    delivery.publish(PublishedSchedule("gone", {"w": _items("a", 2, 100.0)}))
    session = WorkerSession(delivery, Holdings(16), SessionSettings("w"))
    asyncio.run(session.claim(1))
    redis_client.delete(delivery.keys("gone").meta)  # its retention over
    assert asyncio.run(session.claim(1)) == []
    assert session._claims._unanswered == {}

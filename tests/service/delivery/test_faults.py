"""Faults production inflicts on delivery, each reporting lost and accepted-twice counts (both 0)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from service.delivery import CompletionOutcome, Delivery
from service.delivery.reaper import Reaper, reap_all
from service.embedded import EmbeddedServer
from tests.service.delivery.audit import RecordProperty, audit, report
from tests.service.delivery.conftest import schedule
from tests.service.delivery.proxy import ReplyLosingProxy
from tests.service.finished import RESULT


def test_a_completion_whose_reply_is_lost_is_retried_idempotently(
    delivery: Delivery, redis_client: redis.Redis, record_property: RecordProperty
) -> None:
    delivery.publish(schedule("s", {"a": 4}))
    first, *rest = delivery.claim("s", "a", 4)
    assert delivery.complete(first, RESULT) is CompletionOutcome.ACCEPTED  # script loaded, path warm
    kw = redis_client.connection_pool.connection_kwargs
    proxy = ReplyLosingProxy(int(kw["port"]))
    lossy = Delivery(redis.Redis.from_url(proxy.url, decode_responses=True, retry=None))
    try:
        for done, lease in enumerate(rest, start=2):
            lossy.client.ping()  # connected, so the next reply is the completion's
            proxy.lose_next_reply()
            with pytest.raises(redis.ConnectionError):
                lossy.complete(lease, RESULT)  # applied by the server; the reply never arrived
            assert delivery.progress("s").done == done
            assert lossy.complete(lease, RESULT) is CompletionOutcome.DUPLICATE  # the retry: success
    finally:
        proxy.close()
    assert proxy.lost == 3
    result = audit(redis_client, "s")
    assert result.done == 4
    report("lost reply", result, record_property)


def _resending(redis_client: redis.Redis) -> tuple[ReplyLosingProxy, Delivery]:
    """A protocol client through a reply-losing proxy that retries as the service's and a cluster
    client do: a call whose reply is lost is re-sent on a new connection, after the server ran it."""
    proxy = ReplyLosingProxy(int(redis_client.connection_pool.connection_kwargs["port"]))
    client = redis.Redis.from_url(
        proxy.url, decode_responses=True, retry=Retry(NoBackoff(), 2), retry_on_error=[redis.ConnectionError]
    )
    return proxy, Delivery(client)


def test_a_claim_re_sent_after_a_lost_reply_answers_its_first_leases(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(schedule("s", {"a": 6}))
    assert delivery.claim("s", "idle", 1) == []  # script loaded: the lost reply is the claim's own
    proxy, lossy = _resending(redis_client)
    try:
        lossy.client.ping()  # connected, so the next reply is the claim's
        proxy.lose_next_reply()
        leases = lossy.claim("s", "a", 2)  # ran, reply lost, re-sent by the client
    finally:
        proxy.close()
    assert proxy.lost == 1
    assert [lease.key for lease in leases] == ["a-0#0", "a-1#0"]
    progress = delivery.progress("s")
    assert (progress.running, progress.queued) == (2, 4)  # nothing leased that no one knows of
    assert [delivery.complete(lease, RESULT) for lease in leases] == [CompletionOutcome.ACCEPTED] * 2


def test_a_steal_re_sent_after_a_lost_reply_answers_its_first_leases(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    delivery.publish(schedule("s", {"a": 8, "b": 0}))
    assert delivery.steal("s", "a", 1) == []  # script loaded (a's own queue is not empty)
    proxy, lossy = _resending(redis_client)
    try:
        lossy.client.ping()
        proxy.lose_next_reply()
        stolen = lossy.steal("s", "b", 2)
    finally:
        proxy.close()
    assert proxy.lost == 1
    assert [lease.key for lease in stolen] == ["a-7#0", "a-6#0"]
    progress = delivery.progress("s")
    assert (progress.workers["b"].running, progress.workers["a"].queued) == (2, 6)


def test_a_complete_and_claim_re_sent_after_a_lost_reply_leases_nothing_more(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """The pipelined pair is re-sent whole, as redis-py re-sends any pipeline whose reply it lost:
    the completion answers DUPLICATE and the claim must answer its first run's leases, not lease
    more that no one hears of (each would lapse unseen after a lease TTL and cost an attempt)."""
    delivery.publish(schedule("s", {"a": 8}))
    warm, done = delivery.claim("s", "a", 2)
    delivery.complete_and_claim("s", "a", [(warm.key, warm.token, RESULT)], 0)  # both scripts loaded
    proxy, lossy = _resending(redis_client)
    try:
        lossy.client.ping()
        proxy.lose_next_reply()
        outcomes, leases = lossy.complete_and_claim("s", "a", [(done.key, done.token, RESULT)], 2)
    finally:
        proxy.close()
    assert proxy.lost == 1
    assert outcomes == [CompletionOutcome.DUPLICATE]  # the first run accepted it: a success
    assert [lease.key for lease in leases] == ["a-2#0", "a-3#0"]
    progress = delivery.progress("s")
    assert (progress.done, progress.running, progress.queued) == (2, 2, 4)


def test_a_call_id_answers_only_leases_the_worker_still_holds(delivery: Delivery) -> None:
    delivery.publish(schedule("s", {"a": 3}, ttl_ms=100), now_ms=0)
    first = delivery.claim("s", "a", 2, now_ms=0, call_id="c1")
    assert delivery.complete(first[0], RESULT, now_ms=1) is CompletionOutcome.ACCEPTED
    again = delivery.claim("s", "a", 2, now_ms=2, call_id="c1")
    assert [(lease.key, lease.token) for lease in again] == [(first[1].key, first[1].token)]
    fresh = delivery.claim("s", "a", 2, now_ms=3, call_id="c2")  # another call: leases anew
    assert [lease.key for lease in fresh] == ["a-2#0"]


def test_a_crash_after_generating_but_before_completing_is_redelivered_and_done_once(
    delivery: Delivery, redis_client: redis.Redis, record_property: RecordProperty
) -> None:
    delivery.publish(schedule("s", {"a": 4}, ttl_ms=300))
    crashed = delivery.claim("s", "a", 2)  # generated, then the process died: no heartbeat, no complete
    reaper = Reaper(delivery, interval_s=0.05).start()
    try:
        redelivered: list[str] = []
        deadline = time.monotonic() + 5
        while not delivery.progress("s").finished and time.monotonic() < deadline:
            for lease in delivery.claim("s", "a", 4):
                redelivered.append(lease.key)
                assert delivery.complete(lease, RESULT) is CompletionOutcome.ACCEPTED
            time.sleep(0.02)
    finally:
        reaper.stop()
    assert sorted(redelivered) == ["a-0#0", "a-1#0", "a-2#0", "a-3#0"]
    assert [delivery.complete(lease, RESULT) for lease in crashed] == [CompletionOutcome.STALE] * 2
    report("crash before complete", audit(redis_client, "s"), record_property)


def test_a_poison_item_is_dead_lettered_after_max_attempts(
    delivery: Delivery, redis_client: redis.Redis, record_property: RecordProperty
) -> None:
    delivery.publish(schedule("s", {"a": 5}, ttl_ms=100, max_attempts=3), now_ms=0)
    now, crashes = 0, 0
    while not delivery.progress("s").finished:
        for lease in delivery.claim("s", "a", 5, now_ms=now):
            if lease.key == "a-2#0":
                crashes += 1  # the engine dies on this one every time: the lease lapses
            else:
                delivery.complete(lease, RESULT, now_ms=now)
        now += 101
        reap_all(delivery, now_ms=now)
    progress = delivery.progress("s")
    assert (crashes, progress.done, progress.failed) == (3, 4, 1)
    assert [(d.key, d.attempts) for d in progress.dead_letters] == [("a-2#0", 3)]
    report("poison item", audit(redis_client, "s"), record_property)


@pytest.fixture
def aof_server() -> Iterator[EmbeddedServer]:
    """A private server with AOF on (fsync always), so a SIGKILL loses no acknowledged write."""
    with EmbeddedServer(appendonly=True) as server:
        yield server


def _worker(url: str, worker_id: str, stop: threading.Event, accepted: list[str]) -> None:
    """A worker that claims, completes, steals, and rides out a server restart by retrying."""
    delivery = Delivery.from_url(url)
    while not stop.is_set():
        try:
            leases = delivery.claim("s", worker_id, 4) or delivery.steal("s", worker_id, 4)
            if not leases:
                time.sleep(0.01)
            for lease in leases:
                time.sleep(0.002)  # "generate"
                while True:  # a lost reply is retried with the same token: DUPLICATE is success
                    try:
                        if delivery.complete(lease, RESULT) is CompletionOutcome.ACCEPTED:
                            accepted.append(lease.key)
                        break
                    except redis.ConnectionError:
                        time.sleep(0.05)
        except redis.ConnectionError:
            time.sleep(0.05)


def test_redis_killed_and_restarted_with_aof_mid_schedule_loses_nothing(
    aof_server: EmbeddedServer, record_property: RecordProperty
) -> None:
    delivery = Delivery.from_url(aof_server.url)
    delivery.publish(schedule("s", {f"w{i}": 60 for i in range(4)}, ttl_ms=500))
    stop, accepted = threading.Event(), list[str]()
    threads = [
        threading.Thread(target=_worker, args=(aof_server.url, f"w{i}", stop, accepted)) for i in range(4)
    ]
    for t in threads:
        t.start()
    while delivery.progress("s").done < 60:
        time.sleep(0.01)
    done_at_kill = delivery.progress("s").done
    aof_server.kill()  # SIGKILL mid-schedule
    time.sleep(0.3)
    aof_server.start()  # same port, same data dir: AOF replays
    reaper = Reaper(Delivery.from_url(aof_server.url), interval_s=0.1).start()
    deadline = time.monotonic() + 30
    while not delivery.progress("s").finished and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    reaper.stop()
    for t in threads:
        t.join()
    result = audit(redis.Redis.from_url(aof_server.url, decode_responses=True), "s")
    print(f"killed with {done_at_kill}/240 done")
    assert done_at_kill < 240
    assert result.done == 240
    assert len(accepted) == len(set(accepted))  # no worker was ever told ACCEPTED twice for one item
    report("redis SIGKILL + AOF restart", result, record_property)

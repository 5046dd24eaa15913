"""A Redis outage spends no attempt of a lease whose holder lives (docs/delivery.md, "Redis outages").

Lease deadlines are judged on Redis's clock, which runs on while Redis is paused; the holders'
heartbeats cannot land meanwhile. Here the server is SIGSTOPped for twice the lease TTL while a
worker heartbeats its leases every third of the TTL (as a sidecar does) and a reaper passes every
0.1 s (its calls queue up in the paused server's sockets and run the moment it resumes, before any
heartbeat can). Before the fix every lease lapsed at the resume: requeued with an attempt spent, or
dead-lettered on its last one. Workers that really stopped (before or during the outage) must
still have their leases requeued, one lease TTL after the resume at the latest.
"""

from __future__ import annotations

import math
import signal
import threading
import time
from collections.abc import Iterator

import pytest
import redis

from service.delivery import Delivery
from service.delivery.outcomes import CompletionOutcome
from service.delivery.reaper import Reaper
from service.delivery.records import Lease
from service.embedded import EmbeddedServer
from tests.service.delivery.conftest import schedule
from tests.service.finished import RESULT

TTL_MS = 1_500
OUTAGE_S = 2 * TTL_MS / 1000  # past the whole TTL: every lease lapses on Redis's clock


@pytest.fixture
def server() -> Iterator[EmbeddedServer]:
    """A private server to pause (the session's is shared with other tests)."""
    with EmbeddedServer() as srv:
        yield srv


def _delivery(server: EmbeddedServer) -> Delivery:
    """A client that gives up on a silent server after 0.3 s, as the service's and sidecars' do."""
    return Delivery(redis.Redis.from_url(server.url, decode_responses=True, socket_timeout=0.3, retry=None))


class _Heartbeats:
    """A worker's heartbeat loop: every third of the TTL, outage errors ignored (a sidecar's)."""

    def __init__(self, delivery: Delivery, leases: list[Lease]) -> None:
        self.delivery, self.leases = delivery, leases
        self.lost: list[Lease] = []  # leases a heartbeat found gone
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(TTL_MS / 3000):
            try:
                alive = {le.key for le in self.delivery.heartbeat(self.leases)}
            except redis.RedisError:
                continue
            self.lost += [le for le in self.leases if le.key not in alive]
            self.leases = [le for le in self.leases if le.key in alive]

    def end(self) -> None:
        self.stop.set()
        self.thread.join()


def _pause(server: EmbeddedServer, seconds: float) -> None:
    server.signal(signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        server.signal(signal.SIGCONT)


def _requeued(delivery: Delivery, key: str) -> bool:
    state = delivery.client.hget(delivery.keys("s").st, key)
    return str(state).startswith("q|")


def test_an_outage_past_the_lease_ttl_spends_no_attempt_of_a_live_worker(server: EmbeddedServer) -> None:
    delivery = _delivery(server)
    delivery.publish(schedule("s", {"live": 3, "dead": 1}, ttl_ms=TTL_MS, max_attempts=1))
    live = delivery.claim("s", "live", 3)
    delivery.claim("s", "dead", 1)  # never heartbeated: its worker died at once
    beats = _Heartbeats(_delivery(server), live)
    reaper = Reaper(_delivery(server), interval_s=0.1).start()
    try:
        time.sleep(TTL_MS / 1000 + 0.5)  # the dead worker's lease lapses and is reaped (dead letter)
        _pause(server, OUTAGE_S)
        time.sleep(TTL_MS / 1000)  # the heartbeats land again; the reaper passed ~15 times
        assert beats.lost == []
        outcomes = [delivery.complete(le, RESULT) for le in beats.leases]
    finally:
        beats.end()
        reaper.stop()
    assert outcomes == [CompletionOutcome.ACCEPTED] * 3
    assert [(d.key, d.attempts) for d in delivery.progress("s").dead_letters] == [("dead-0#0", 1)]
    assert sorted((r.key, r.attempt) for r in delivery.read_results("s")) == [
        (f"live-{i}#0", 1) for i in range(3)
    ]


def test_a_second_outage_after_the_holder_heartbeated_again_spends_no_attempt_either(
    server: EmbeddedServer,
) -> None:
    delivery = _delivery(server)
    delivery.publish(schedule("s", {"live": 2}, ttl_ms=TTL_MS, max_attempts=1))
    beats = _Heartbeats(_delivery(server), delivery.claim("s", "live", 2))
    reaper = Reaper(_delivery(server), interval_s=0.1).start()
    try:
        for _ in range(2):  # the first grace is cleared by the heartbeats between the outages
            time.sleep(TTL_MS / 1000)
            _pause(server, OUTAGE_S)
        time.sleep(TTL_MS / 1000)
        assert beats.lost == []
        outcomes = [delivery.complete(le, RESULT) for le in beats.leases]
    finally:
        beats.end()
        reaper.stop()
    assert outcomes == [CompletionOutcome.ACCEPTED] * 2
    assert delivery.progress("s").dead_letters == ()


def test_a_worker_that_died_before_or_during_the_outage_has_its_lease_requeued(
    server: EmbeddedServer,
) -> None:
    delivery = _delivery(server)
    delivery.publish(schedule("s", {"live": 1, "before": 1, "during": 1}, ttl_ms=TTL_MS))
    live, before, during = (delivery.claim("s", w, 1) for w in ("live", "before", "during"))
    beats = [_Heartbeats(_delivery(server), leases) for leases in (live, before, during)]
    reaper = Reaper(_delivery(server), interval_s=0.1).start()
    try:
        time.sleep(TTL_MS / 1000)
        beats[1].end()  # dies 0.8 TTL before the outage: its lease lapses during it
        time.sleep(0.8 * TTL_MS / 1000)
        beats[2].end()  # dies as Redis stops answering
        _pause(server, OUTAGE_S)
        resumed = time.monotonic()
        while not (_requeued(delivery, "before-0#0") and _requeued(delivery, "during-0#0")):
            assert time.monotonic() - resumed < TTL_MS / 1000 + 2.0, "a dead worker's lease was not requeued"
            assert not _requeued(delivery, "live-0#0")
            time.sleep(0.05)
        assert beats[0].lost == []
    finally:
        for b in beats:
            b.end()
        reaper.stop()
    assert delivery.complete(beats[0].leases[0], RESULT) is CompletionOutcome.ACCEPTED


def test_a_dead_worker_s_lease_is_graced_at_most_once_however_often_silences_recur(
    server: EmbeddedServer,
) -> None:
    """No heartbeat, no reaper: only a reap every 0.6 TTL, each after a silence past half a TTL (what
    an outage looks like). The lease gets one grace (``P:graced``: its holder never heartbeated it
    since) and lapses: later than a TTL, never never."""
    delivery = _delivery(server)
    delivery.publish(schedule("s", {"dead": 1}, ttl_ms=TTL_MS))
    delivery.claim("s", "dead", 1)
    claimed = time.monotonic()
    while not delivery.reap("s").requeued:
        assert time.monotonic() - claimed < 2 * TTL_MS / 1000 + 1.0, "a dead worker's lease never lapses"
        time.sleep(0.6 * TTL_MS / 1000)


def test_a_silence_over_more_running_leases_than_one_lua_call_takes_graces_every_one(
    server: EmbeddedServer,
) -> None:
    """The script that ends a silence reads the grace marks of every lease that ran through it. Read
    in one HMGET, 8,500 of them went past what Lua's ``unpack`` takes (~8,000): the script failed
    before it rewrote the pulse, so every later script of the schedule failed too, for good."""
    delivery = Delivery(redis.Redis.from_url(server.url, decode_responses=True))
    # The first leases must outlive the claims of the rest plus the silence: on a loaded host the
    # 8,500 claims took over 0.8 s and a 2 s TTL lapsed the first 5,000. So the TTL is five times
    # what the same claims take on a schedule of their own, 2 s at least.
    ttl_ms = max(2_000, math.ceil(5_000 * _claim_seconds(delivery, "probe", 8_500)))
    delivery.publish(schedule("s", {"w": 8_500}, ttl_ms=ttl_ms))
    leases = [lease for _ in range(9) for lease in delivery.claim("s", "w", 1_000)]
    time.sleep(0.6 * ttl_ms / 1000)  # a silence past half the TTL: an outage, to the next script
    assert len(delivery.heartbeat(leases)) == 8_500
    assert delivery.client.hget(delivery.keys("s").meta, "graced") == "8500"
    assert delivery.reap("s").requeued == 0


def _claim_seconds(delivery: Delivery, schedule_id: str, items: int) -> float:
    """How long claiming ``items`` leases takes here now, in calls of 1,000, on a schedule of its own."""
    delivery.publish(schedule(schedule_id, {"w": items}, ttl_ms=60_000))
    started = time.monotonic()
    while delivery.claim(schedule_id, "w", 1_000):
        pass
    return time.monotonic() - started

"""The reaper walks every active schedule, and forgets schedules whose keys expired."""

from __future__ import annotations

import logging
import time

import pytest
import redis
from redis.exceptions import ClusterDownError

from service.delivery import Delivery, LeaseSettings, PublishedSchedule
from service.delivery.keys import ScheduleKeys
from service.delivery.outcomes import ReapReport
from service.delivery.reaper import LOGGED_WORKERS, Reaper, reap_all
from service.embedded import EmbeddedServer
from tests.service.delivery.conftest import schedule


def test_one_pass_reaps_every_active_schedule(delivery: Delivery) -> None:
    for sid in ("s1", "s2"):
        delivery.publish(schedule(sid, {"a": 2}, ttl_ms=100), now_ms=0)
        delivery.claim(sid, "a", 2, now_ms=0)
    reports = reap_all(delivery, now_ms=101)
    assert {sid: r.requeued for sid, r in reports.items()} == {"s1": 2, "s2": 2}


def test_a_pass_names_the_workers_whose_leases_lapsed_each_once(delivery: Delivery) -> None:
    delivery.publish(schedule("s", {"a": 2, "b": 1, "c": 1}, ttl_ms=100), now_ms=0)
    for worker in ("b", "a"):
        delivery.claim("s", worker, 2, now_ms=0)
    delivery.claim("s", "c", 1, now_ms=90)  # c heartbeats late enough: not lapsed at 101
    report = reap_all(delivery, now_ms=101)["s"]
    assert (report.requeued, report.workers) == (3, ("a", "b"))


def test_the_reaper_s_lapse_warning_says_whose_leases_lapsed_in_a_bounded_list(
    delivery: Delivery, caplog: pytest.LogCaptureFixture
) -> None:
    workers = {f"w{i:02d}": 1 for i in range(LOGGED_WORKERS + 3)}  # a whole node's sidecars gone
    delivery.publish(schedule("s", workers, ttl_ms=50), now_ms=0)
    for worker in workers:
        delivery.claim("s", worker, 1, now_ms=0)  # all lapsed long ago on the server's clock: one pass
    reaper = Reaper(delivery, interval_s=0.02)
    with caplog.at_level(logging.WARNING, logger="service.delivery.reaper"):
        reaper.start()
        deadline = time.monotonic() + 5
        while delivery.progress("s").queued != len(workers) and time.monotonic() < deadline:
            time.sleep(0.02)
        reaper.stop()
    [line] = [r for r in caplog.records if r.getMessage().startswith("reaped expired leases")]
    assert (
        line.getMessage()
        == f"reaped expired leases of {', '.join(sorted(workers)[:LOGGED_WORKERS])} (+3 more)"
    )
    assert (line.__dict__["workers"], line.__dict__["workers_count"]) == (
        sorted(workers)[:LOGGED_WORKERS],
        19,
    )


def test_a_schedule_whose_keys_expired_leaves_the_index(delivery: Delivery) -> None:
    short = schedule("gone", {"a": 1})
    short = PublishedSchedule(short.schedule_id, short.queues, lease=LeaseSettings(retention_s=1))
    delivery.publish(short)
    delivery.publish(schedule("kept", {"a": 1}))
    time.sleep(1.1)  # retention is wall-clock: the server expires the keys
    assert reap_all(delivery).keys() == {"kept"}
    assert delivery.active_schedules() == ["kept"]


def test_the_reaper_thread_keeps_reaping_and_stops(delivery: Delivery) -> None:
    delivery.publish(schedule("s", {"a": 1}, ttl_ms=50))
    delivery.claim("s", "a", 1)
    reaper = Reaper(delivery, interval_s=0.02).start()
    try:
        deadline = time.monotonic() + 5
        while delivery.progress("s").queued != 1 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        reaper.stop()
    assert delivery.progress("s").queued == 1
    assert reaper.passes >= 1


def test_a_schedule_whose_script_fails_is_skipped_and_the_others_are_still_reaped(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    for sid in ("bad", "good"):
        delivery.publish(schedule(sid, {"a": 2}, ttl_ms=100), now_ms=0)
        delivery.claim(sid, "a", 2, now_ms=0)
    states = ScheduleKeys(delivery.prefix, "bad").st  # a record another tool wrote: the script fails on it
    redis_client.hset(states, next(iter(redis_client.hkeys(states))), "garbage")
    reports = reap_all(delivery, now_ms=101)
    assert {sid: r.requeued for sid, r in reports.items()} == {"good": 2}


def test_a_redis_outage_is_logged_when_it_starts_and_when_it_ends_not_once_a_pass(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two outages of the real server (killed, then restarted on its port): each is one warning when
    the passes start failing and one line when they go through again. A warning a pass (one a second
    on every replica) had buried every other line, and nothing said when the outage ended."""
    server = EmbeddedServer().start()
    delivery = Delivery.from_url(server.url)
    delivery.publish(schedule("s", {"a": 1}))
    with caplog.at_level(logging.INFO, logger="service.delivery.reaper"):
        reaper = Reaper(delivery, interval_s=0.02).start()
        try:
            for _ in range(2):
                _outage(server, reaper)
        finally:
            reaper.stop()
            server.stop()
    lines = [(r.levelno, r.getMessage().split(":")[0]) for r in caplog.records]
    assert lines == 2 * [
        (logging.WARNING, "reaper pass failed"),
        (logging.INFO, "reaper passes go through again"),
    ]


def _outage(server: EmbeddedServer, reaper: Reaper) -> None:
    """Kill the server for some 20 passes, restart it, and return once passes go through again."""
    server.kill()
    time.sleep(0.5)
    passes = reaper.passes
    server.start()
    deadline = time.monotonic() + 10
    while reaper.passes < passes + 5 and time.monotonic() < deadline:  # and a few more: no repeats
        time.sleep(0.02)
    assert reaper.passes >= passes + 5


class _SlotUnserved(Delivery):
    """The real server, but the reap of schedule ``s`` answers CLUSTERDOWN while ``unserved`` is set
    (its slot's master failing over)."""

    unserved = True

    def reap(self, schedule_id: str, now_ms: int | None = None, limit: int = 1000) -> ReapReport:
        if self.unserved and schedule_id == "s":
            raise ClusterDownError("CLUSTERDOWN The cluster is down")
        return super().reap(schedule_id, now_ms, limit)


def test_a_cluster_slot_not_served_is_an_outage_of_the_passes_not_a_damaged_schedule(
    redis_url: str, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """CLUSTERDOWN is a ``ResponseError``: it was logged as a damaged schedule, an error line every
    pass while the master failed over. Now one warning, and one line once the passes go through."""
    delivery = _SlotUnserved(redis_client)
    delivery.publish(schedule("s", {"a": 1}))
    with caplog.at_level(logging.INFO, logger="service.delivery.reaper"):
        reaper = Reaper(delivery, interval_s=0.02).start()
        try:
            _logged(caplog)
            time.sleep(0.2)  # some more passes meet it
            delivery.unserved = False
            _passes(reaper, 5)
        finally:
            reaper.stop()
    lines = [(r.levelno, r.getMessage().split(":")[0]) for r in caplog.records]
    went_through = (logging.INFO, "reaper passes go through again")
    assert lines == [(logging.WARNING, "reaper pass failed"), went_through]


def _passes(reaper: Reaper, more: int) -> None:
    """Return once ``reaper`` has gone round ``more`` times again."""
    passes, deadline = reaper.passes, time.monotonic() + 30
    while reaper.passes < passes + more and time.monotonic() < deadline:
        time.sleep(0.02)
    assert reaper.passes >= passes + more


def _logged(caplog: pytest.LogCaptureFixture) -> None:
    """Return once a first line is logged (a pass met the unserved slot)."""
    deadline = time.monotonic() + 30
    while not caplog.records and time.monotonic() < deadline:
        time.sleep(0.02)
    assert caplog.records

"""The reapers' lapse index: a pass reaps only the schedules a lease of which may have lapsed, and
never misses one that has (a lease claimed after a pass, a schedule published again under its id)."""

from __future__ import annotations

from typing import Any

from service.delivery import Delivery, ReapReport
from service.delivery.keys import ScheduleKeys, lapse_index
from service.delivery.reaper import reap_all
from tests.service.delivery.conftest import schedule


def _running(delivery: Delivery, schedule_ids: list[str], ttl_ms: int) -> None:
    """Publish each schedule at 0 and lease one of its two items at 0 (deadline ``ttl_ms``)."""
    for sid in schedule_ids:
        delivery.publish(schedule(sid, {"a": 2}, ttl_ms=ttl_ms), now_ms=0)
        delivery.claim(sid, "a", 1, now_ms=0)


def test_a_pass_skips_the_schedules_none_of_whose_leases_can_have_lapsed_yet(delivery: Delivery) -> None:
    _running(delivery, ["s1", "s2", "s3"], ttl_ms=9_999)
    assert reap_all(delivery, now_ms=1).keys() == {"s1", "s2", "s3"}  # new to the index: reaped once
    assert reap_all(delivery, now_ms=3_334) == {}  # a third of the ttl on: no script runs yet
    visited = reap_all(delivery, now_ms=3_335)  # then one a third of a ttl while leases run (pulse)
    seen = {sid: (report.requeued, report.quiet_until_ms) for sid, report in visited.items()}
    assert seen == dict.fromkeys(("s1", "s2", "s3"), (0, 6_668))
    assert reap_all(delivery, now_ms=6_669).keys() == {"s1", "s2", "s3"}  # quiet until 9,999 now
    assert reap_all(delivery, now_ms=9_999) == {}  # at their deadline, not past it: no script runs
    lapsed = reap_all(delivery, now_ms=10_000)
    assert {sid: report.requeued for sid, report in lapsed.items()} == {"s1": 1, "s2": 1, "s3": 1}


def test_a_lease_claimed_after_a_pass_is_reaped_once_it_lapses(delivery: Delivery) -> None:
    delivery.publish(schedule("s", {"a": 1}, ttl_ms=1_000), now_ms=0)
    assert reap_all(delivery, now_ms=0)["s"].quiet_until_ms == 1_000  # nothing leased: now + ttl
    delivery.claim("s", "a", 1, now_ms=600)  # deadline 1,600, past the pass's bound of 1,000
    assert reap_all(delivery, now_ms=1_000) == {}
    assert reap_all(delivery, now_ms=1_001)["s"].quiet_until_ms == 1_334  # a lease runs: a third of the ttl
    assert reap_all(delivery, now_ms=1_335)["s"].quiet_until_ms == 1_600  # nothing lapsed yet
    assert reap_all(delivery, now_ms=1_600) == {}
    assert reap_all(delivery, now_ms=1_601)["s"].requeued == 1


def test_a_heartbeat_moves_the_schedule_s_next_reap_later(delivery: Delivery) -> None:
    delivery.publish(schedule("s", {"a": 1}, ttl_ms=1_000), now_ms=0)
    [lease] = delivery.claim("s", "a", 1, now_ms=0)
    reap_all(delivery, now_ms=1)
    delivery.heartbeat([lease], now_ms=900)  # deadline 1,900
    assert reap_all(delivery, now_ms=1_001)["s"] == ReapReport(0, 0, (), 1_334)  # due by the old bound
    assert reap_all(delivery, now_ms=1_335)["s"] == ReapReport(0, 0, (), 1_668)
    assert reap_all(delivery, now_ms=1_669)["s"] == ReapReport(0, 0, (), 1_900)
    assert reap_all(delivery, now_ms=1_900) == {}
    assert reap_all(delivery, now_ms=1_901)["s"].requeued == 1


def test_a_schedule_published_again_under_its_id_is_reaped_on_its_own_lease_ttl(
    delivery: Delivery, redis_client: Any
) -> None:
    _running(delivery, ["s"], ttl_ms=100_000)
    reap_all(delivery, now_ms=1)  # the index: nothing of s lapses before 100,000
    for key in list(redis_client.scan_iter(match=ScheduleKeys(delivery.prefix, "s").pattern)):
        redis_client.delete(key)  # its retention passed before any reaper noticed
    _running(delivery, ["s"], ttl_ms=100)
    assert reap_all(delivery, now_ms=101)["s"].requeued == 1


def test_the_index_keeps_no_entry_for_a_schedule_that_settled(delivery: Delivery, redis_client: Any) -> None:
    delivery.publish(schedule("s", {"a": 1}, ttl_ms=100, max_attempts=1), now_ms=0)
    delivery.claim("s", "a", 1, now_ms=0)
    assert reap_all(delivery, now_ms=101)["s"].dead_lettered == 1  # its last item: settled and retired
    reap_all(delivery, now_ms=102)
    assert (delivery.active_schedules(), redis_client.zcard(lapse_index(delivery.prefix))) == ([], 0)


def test_on_the_server_s_clock_a_pass_skips_a_schedule_until_its_lease_can_lapse(delivery: Delivery) -> None:
    delivery.publish(schedule("s", {"a": 2}, ttl_ms=60_000))
    delivery.claim("s", "a", 1)
    assert reap_all(delivery).keys() == {"s"}
    assert reap_all(delivery) == {}

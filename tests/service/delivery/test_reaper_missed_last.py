"""A pass reaps the schedules the last pass missed too, after the others due (``reaper._missed_last``):
moved to the end of the pass, not out of it.

Found by mutation testing (mutants13, docs/experiments.md): a pass that dropped them passed every
test, though a schedule missed once (its master down for a pass) would then have its lapsed leases
never requeued while it stayed in the last pass's misses; so did keeping the misses of a pass that
reached everything, and forgetting them at a pass that could not read what is due."""

from __future__ import annotations

import socket

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from service.delivery import Delivery
from service.delivery.reaper import Reaper, _missed_last, reap_all
from tests.service.delivery.conftest import schedule


def test_the_schedules_missed_last_are_reaped_after_the_others(delivery: Delivery) -> None:
    for sid in ("s1", "s2", "s3"):
        delivery.publish(schedule(sid, {"a": 1}, ttl_ms=100), now_ms=0)
        delivery.claim(sid, "a", 1, now_ms=0)
    reports = reap_all(delivery, now_ms=101, last=["s1"])
    assert list(reports) == ["s2", "s3", "s1"]
    assert {sid: r.requeued for sid, r in reports.items()} == {"s1": 1, "s2": 1, "s3": 1}


def test_the_order_keeps_each_part_as_it_was_due() -> None:
    assert _missed_last(["a", "b", "c", "d"], {"c", "a"}) == ["b", "d", "a", "c"]


def test_a_pass_that_reached_every_schedule_forgets_the_last_ones_misses(delivery: Delivery) -> None:
    delivery.publish(schedule("s1", {"a": 1}, ttl_ms=100), now_ms=0)
    delivery.claim("s1", "a", 1, now_ms=0)
    reaper = Reaper(delivery, interval_s=60.0)
    reaper._missed = {"s0"}  # missed by the pass before, gone since
    reaper._pass()
    assert reaper._missed == set()


def test_a_pass_that_could_not_read_what_is_due_keeps_the_last_ones_misses() -> None:
    with socket.socket() as probe:  # a port nothing listens on: the read of what is due is refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # refused once: redis-py's default retry tried 3 more times after 1-10 s backoffs, the same error
    reaper = Reaper(Delivery(redis.Redis(port=port, retry=Retry(NoBackoff(), 0))), interval_s=60.0)
    reaper._missed = {"s1"}
    with pytest.raises(redis.ConnectionError):
        reaper._pass()
    assert reaper._missed == {"s1"}

"""``lua/planning.lua``'s keep, which the keeper of a live request's marks sends
(``service.pipeline.step_keeper``): it pushes a live mark on, never earlier than it was, and never
writes one back that was taken back, withdrawn, published or lapsed, so a mark whose request died
(its replica's keeper gone with it) lapses at the deadline it was last given; an id a DELETE withdrew
has its withdrawal kept instead, while its request lives."""

from __future__ import annotations

import time

import pytest
import redis

from service.delivery import Delivery, keys
from tests.cluster import LocalCluster

T0 = 1_000_000  # explicit clock (ms)
PLANNING = keys.schedule_keys("s").planning


def _marked(delivery: Delivery, request_id: str, ttl_ms: int, now_ms: int | None = T0) -> None:
    delivery.mark_planning("s", request_id, ttl_ms=1_000, now_ms=now_ms)
    delivery.extend_planning("s", request_id, ttl_ms=ttl_ms, now_ms=now_ms)


def _kept(
    delivery: Delivery, marks: list[tuple[str, str]], life_ms: int, now_ms: int | None = None
) -> list[bool]:
    return [delivery.keep_mark(schedule_id, request_id, life_ms, now_ms) for schedule_id, request_id in marks]


def test_a_keep_pushes_a_live_mark_to_its_life_past_now_and_the_key_with_it(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    _marked(delivery, "r", 10_000)
    assert _kept(delivery, [("s", "r")], 60_000, now_ms=T0 + 9_000) == [True]
    assert redis_client.hget(PLANNING, "r") == f"{T0}:{T0 + 69_000}"
    assert 55_000 < redis_client.pttl(PLANNING) <= 60_000


def test_a_keep_never_brings_a_mark_s_deadline_earlier(delivery: Delivery, redis_client: redis.Redis) -> None:
    """The entry keeps its deadline; the key's expiry is never brought earlier. (The key's TTL is
    on the server's clock, the entry's on the pinned one: on a loaded host the server's runs ahead
    of the pin's 5 ms, so the keep may push the key's expiry by the difference, never pull it in.)"""
    _marked(delivery, "r", 100_000)
    entry, expires_at = redis_client.hget(PLANNING, "r"), redis_client.pexpiretime(PLANNING)
    assert _kept(delivery, [("s", "r")], 1_000, now_ms=T0 + 5) == [True]
    assert redis_client.hget(PLANNING, "r") == entry == f"{T0}:{T0 + 100_000}"
    assert redis_client.pexpiretime(PLANNING) >= expires_at


def test_a_keep_of_a_mark_taken_back_writes_nothing(delivery: Delivery, redis_client: redis.Redis) -> None:
    """The request answered (its take-back): a keep sent before and landing after (a tick racing the
    take-back) must not bring the mark back."""
    _marked(delivery, "r", 10_000, now_ms=None)
    delivery.unmark_planning("s", "r")
    assert _kept(delivery, [("s", "r")], 60_000) == [False]
    assert redis_client.exists(PLANNING) == 0


def test_a_keep_of_a_withdrawn_id_keeps_the_withdrawal_and_writes_no_mark(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """A DELETE withdrew the id while its request lives on: the withdrawal (the retention, or what
    the mark had left) is pushed to the keep's life, never shortened, so the publish the request
    makes however late is still refused; the mark is not written back (a second DELETE still
    answers the withdrawal, a second POST is refused by it)."""
    withdrawn = keys.schedule_keys("s").withdrawn
    _marked(delivery, "r", 10_000, now_ms=None)
    delivery.cancel("s", withdraw_s=1)
    assert _kept(delivery, [("s", "r")], 60_000) == [True]
    assert 55_000 < redis_client.pttl(withdrawn) <= 60_000
    assert redis_client.exists(PLANNING) == 0
    assert _kept(delivery, [("s", "r")], 1_000) == [True]
    assert redis_client.pttl(withdrawn) > 55_000


def test_a_keep_of_a_mark_past_its_deadline_writes_nothing_though_the_key_lives_on(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """Another request's entry keeps the key: the lapsed one stays lapsed (its keeper was late past
    its deadline, a request whose replica may be gone), only the other's is kept."""
    _marked(delivery, "late", 10_000)
    _marked(delivery, "other", 100_000)
    before = redis_client.hgetall(PLANNING)
    assert _kept(delivery, [("s", "late"), ("s", "other")], 60_000, now_ms=T0 + 10_001) == [False, True]
    assert redis_client.hget(PLANNING, "late") == before["late"]
    assert redis_client.hget(PLANNING, "other") == before["other"]


def test_a_mark_no_one_keeps_any_more_lapses_at_the_deadline_last_given(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """A replica that dies keeps nothing after: the key expires at the last keep's deadline on Redis's
    clock, a DELETE then finds the id unknown, and a keep arriving later (nothing sends one, but a
    keeper's buffered write could land) writes nothing."""
    _marked(delivery, "r", 200, now_ms=None)
    assert _kept(delivery, [("s", "r")], 300) == [True]
    deadline = time.monotonic() + 10
    while redis_client.exists(PLANNING) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert redis_client.exists(PLANNING) == 0
    assert _kept(delivery, [("s", "r")], 60_000) == [False]
    assert redis_client.exists(PLANNING) == 0


@pytest.mark.slow
def test_marks_of_two_ids_are_kept_each_in_its_own_slot_on_redis_cluster(redis_cluster: LocalCluster) -> None:
    """One call per mark, each on its schedule's slot (the two ids hash apart)."""
    client = redis_cluster.client()
    delivery = Delivery(client)
    for schedule_id in ("a", "b"):
        delivery.mark_planning(schedule_id, "r", 1_000)
        delivery.extend_planning(schedule_id, "r", 2_000)
    assert client.cluster_keyslot(keys.schedule_keys("a").planning) != client.cluster_keyslot(
        keys.schedule_keys("b").planning
    )
    assert _kept(delivery, [("a", "r"), ("b", "r"), ("a", "gone")], 600_000) == [True, True, False]
    for schedule_id in ("a", "b"):
        assert client.pttl(keys.schedule_keys(schedule_id).planning) > 500_000


def test_a_keep_landing_at_the_marks_deadline_itself_still_finds_it_live(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """A mark lives through the millisecond of its deadline (as the extend judges it): a keeper's tick
    landing then pushes it on rather than leaving a live request's mark to lapse."""
    _marked(delivery, "r", 10_000)
    assert _kept(delivery, [("s", "r")], 60_000, now_ms=T0 + 10_000) == [True]
    assert redis_client.hget(PLANNING, "r") == f"{T0}:{T0 + 70_000}"

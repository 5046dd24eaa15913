"""The push-mode sidecar in process, against real Redis and a real engine-sim server on loopback: how
many items it runs together (slots, KV admission) and what it measures of them, how it stops (the
drain, its timeout, Redis down or stalled through it), and a lease or schedule lost under a running
item. What it does with what its engine answers (ready, down, aborting, refusing an item) is
test_runner_engine_replies.py's."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace

import httpx
import pytest
import redis

from service.delivery.protocol import Delivery
from service.embedded import EmbeddedServer
from service.sidecar.metrics import exposition
from service.sidecar.session import RELEASE_GRACE_S
from service.sidecar.session_settings import SessionStats
from service.sidecar.timings import Durations
from tests.service.sidecar.procs import item, publish, run_until, tally
from tests.service.sidecar.push_runner import push_sidecar
from tests.service.sidecar.spies import MostStarted, Started, first_generation, held_generation


def _engine_stats(url: str) -> dict[str, int]:
    return dict(httpx.get(f"{url}/sim/stats").json())


def _finished(delivery: Delivery, sid: str) -> Callable[[], bool]:
    return lambda: delivery.progress(sid).finished


def test_the_sidecar_keeps_no_more_than_max_num_seqs_in_flight(
    redis_client: redis.Redis, redis_url: str, engine_url: str
) -> None:
    delivery = Delivery.from_url(redis_url)
    items = [item(f"p{i}", 0, 2000) for i in range(10)]  # ~0.15 s each: the slots overlap
    publish(delivery, "slots", {"w0": items})
    holdings = MostStarted(3)  # counted as the sidecar starts items (see the KV test below)
    stats = run_until(push_sidecar(redis_url, engine_url, holdings=holdings), _finished(delivery, "slots"))
    assert stats.accepted == 10
    assert holdings.most == 3
    assert _engine_stats(engine_url)["max_running"] <= 3  # and the engine ran no more
    assert tally(delivery, "slots", {i.key for i in items}) == (0, 0)


def test_each_completed_result_carries_the_mean_concurrency_it_ran_at_for_speed_learning(
    redis_client: redis.Redis, redis_url: str, engine_url: str
) -> None:
    delivery = Delivery.from_url(redis_url)
    items = [item(f"p{i}", 0, 2000) for i in range(6)]  # ~0.15 s each, three at a time
    publish(delivery, "conc", {"w0": items})
    run_until(push_sidecar(redis_url, engine_url, slots=3), _finished(delivery, "conc"))
    concurrency = [float(r.result.extra["concurrency"]) for r in delivery.read_results("conc")]
    assert len(concurrency) == 6
    assert all(1.0 <= c <= 3.0 for c in concurrency)
    assert max(concurrency) > 1.5  # they overlapped, and the reports say so
    caps = {r.result.extra["max_new_tokens"] for r in delivery.read_results("conc")}
    assert caps == {items[0].max_new_tokens}  # a cut output's cap travels with it to the actuals


def test_each_item_s_engine_seconds_are_counted_in_the_generation_histogram(
    redis_client: redis.Redis, redis_url: str, engine_url: str
) -> None:
    delivery = Delivery.from_url(redis_url)
    items = [item(f"p{i}", 0, 2000) for i in range(4)]
    publish(delivery, "gen", {"w0": items})
    sidecar = push_sidecar(redis_url, engine_url, slots=2)
    run_until(sidecar, _finished(delivery, "gen"))
    lines = exposition(sidecar, "w0").decode().splitlines()
    assert 'rollout_sidecar_generation_seconds_count{worker_id="w0"} 4.0' in lines
    assert 'rollout_sidecar_generation_seconds_bucket{le="+Inf",worker_id="w0"} 4.0' in lines
    total = next(line for line in lines if line.startswith("rollout_sidecar_generation_seconds_sum"))
    assert float(total.rsplit(" ", 1)[1]) > 0


def test_the_generation_histogram_tells_apart_items_of_many_minutes() -> None:
    """A long chain of thought runs for many minutes: a top bucket of a minute or two would put every
    such item in +Inf, and their quantiles would say nothing."""
    durations = Durations()
    durations.observe(20 * 60.0)
    durations.observe(45 * 60.0)
    buckets, total = durations.snapshot()
    assert total == 65 * 60.0
    assert [count for _, count in buckets].count(1.0) > 0  # some finite bucket holds one, not both


@pytest.mark.parametrize(("kv_admission", "most_together"), [(True, 2), (False, 4)])
def test_kv_admission_runs_together_only_what_fits_the_engine_cache(
    redis_client: redis.Redis,
    redis_url: str,
    engine_url: str,
    kv_admission: bool,
    most_together: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Counted where the sidecar starts items, not read off the engine's largest batch: the four
    requests started together reach the engine one by one, and on a loaded host the first (~0.15 s)
    can finish before the last arrives (the sidecar had started 4, the engine's max_running was 3:
    once at load ~40, once in 15 runs under 20 CPU burners).

    When a second joins the one running is a condition, not a moment of the wall clock: the sidecar
    estimates a running item's progress from its decode rate and the time since it started
    (``Holdings.can_start``), an estimate that stops at the item's cap, and the engine holds the
    second item's request until the sidecar has started a third (``spies.held_generation``). On
    uncapped items the third fitted only while the second was estimated past 1,200 of its 2,000
    tokens and not yet ended, ~60 ms of a ~0.15 s run: a sidecar loop starved past it started every
    item alone (``assert 1 == 2``, once at load 16-37)."""
    delivery = Delivery.from_url(redis_url)
    # 100 + 2,000 tokens each, predicted exactly and capped there, 3,200 tokens of cache: a second fits
    # beside one running once that one is estimated past 1,000 tokens, and from then on (at its cap,
    # 2,100 tokens, it is expected to run a quarter more: a peak of 2,600 + 600), a third never does.
    items = [replace(item(f"p{i}", 0, 2000, predicted=2000), max_new_tokens=2000) for i in range(4)]
    publish(delivery, "kv", {"w0": items}, kv_admission=kv_admission)
    holdings = MostStarted(8, 3200)
    # the first runs alone (no decode rate before it ends: 2 x 2,100 reserved is past 3,200), so the second
    held_generation(monkeypatch, 2, lambda: holdings.starts >= 3)
    stats = run_until(push_sidecar(redis_url, engine_url, holdings=holdings), _finished(delivery, "kv"))
    assert stats.accepted == 4
    assert holdings.most == most_together
    assert _engine_stats(engine_url)["max_running"] <= most_together  # and the engine ran no more


def test_on_stop_running_items_finish_and_nothing_more_is_claimed(
    redis_client: redis.Redis, redis_url: str, engine_url: str
) -> None:
    delivery = Delivery.from_url(redis_url)
    items = [item(f"p{i}", 0, 12_000) for i in range(4)]  # ~1 s each: stop comes while the first run
    # Leases long enough that a heartbeat late on a loaded host cannot lapse one: what is tested is
    # the drain, and a lapsed lease is (rightly) never accepted (seen once: accepted 0 of 2).
    publish(delivery, "drain", {"w0": items}, lease_ttl_ms=10_000)
    stop = asyncio.Event()
    holdings = Started(2, at=2, then=stop.set)  # stopped as the second starts, before any ends
    stats = run_until(push_sidecar(redis_url, engine_url, holdings=holdings), stop.is_set, stop=stop)
    progress = delivery.progress("drain")
    assert (stats.accepted, stats.released) == (2, 0)
    assert (progress.done, progress.queued, progress.running) == (2, 2, 0)


def test_items_still_running_at_the_drain_timeout_are_released_without_spending_an_attempt(
    redis_client: redis.Redis, redis_url: str, engine_url: str
) -> None:
    delivery = Delivery.from_url(redis_url)
    items = [item(f"p{i}", 0, 200_000 // 20) for i in range(2)]  # far longer than the drain timeout
    publish(delivery, "release", {"w0": items})
    stop = asyncio.Event()
    holdings = Started(2, at=2, then=stop.set)  # stopped as the second starts, before any ends
    sidecar = push_sidecar(redis_url, engine_url, drain_timeout_s=0.1, holdings=holdings)
    stats = run_until(sidecar, stop.is_set, stop=stop)
    assert (stats.accepted, stats.released) == (0, 2)
    assert delivery.progress("release").queued == 2
    again = delivery.claim("release", "w0", 2)
    assert [lease.attempt for lease in again] == [1, 1]  # the released attempt was not counted


def test_a_stop_while_redis_is_down_keeps_to_the_drain_timeout_and_leaves_the_leases_to_lapse(
    engine_url: str,
) -> None:
    server = EmbeddedServer().start()
    try:
        publish(Delivery.from_url(server.url), "outage", {"w0": [item(f"p{i}", 0, 10_000) for i in range(2)]})
        stop = asyncio.Event()

        def redis_dies_and_the_sidecar_stops() -> None:  # as the second starts, before any ends
            server.kill()
            stop.set()

        holdings = Started(2, at=2, then=redis_dies_and_the_sidecar_stops)
        sidecar = push_sidecar(server.url, engine_url, drain_timeout_s=0.5, holdings=holdings)
        started = time.monotonic()
        stats = run_until(sidecar, stop.is_set, stop=stop)  # raised through the drain before
        assert time.monotonic() - started < 15.0  # not the 60 s of retrying a release
        assert (stats.accepted, stats.released) == (0, 0)
    finally:
        server.stop()


def test_a_lease_lost_mid_generation_cancels_the_engine_request_and_the_item_is_done_once(
    redis_client: redis.Redis,
    redis_url: str,
    engine_url: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    delivery = Delivery.from_url(redis_url)
    long_item = item("p", 0, 6000)  # ~0.5 s
    publish(delivery, "lost", {"w0": [long_item]}, lease_ttl_ms=60_000)

    def lapses() -> None:  # as the engine takes the request in: the lease "lapses" under it
        delivery.reap("lost", now_ms=int(time.time() * 1000) + 3_600_000)

    first_generation(monkeypatch, lapses)
    with caplog.at_level(logging.WARNING, logger="service.sidecar"):
        stats = run_until(push_sidecar(redis_url, engine_url, heartbeat_s=0.05), _finished(delivery, "lost"))
    assert (stats.lost, stats.accepted, stats.stale) == (1, 1, 0)
    lost_lines = [r for r in caplog.records if "lost; stopping it" in r.getMessage()]
    assert [getattr(r, "schedule_id", None) for r in lost_lines] == ["lost"]  # which step lost it
    assert _engine_stats(engine_url)["cancelled"] == 1
    assert [r.attempt for r in delivery.read_results("lost")] == [2]
    assert tally(delivery, "lost", {long_item.key}) == (0, 0)


def test_a_result_for_a_schedule_gone_from_redis_is_counted_stale_and_not_promised_again(
    redis_client: redis.Redis,
    redis_url: str,
    engine_url: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "gone", {"w0": [item("p", 0, 6000)]}, lease_ttl_ms=60_000)  # ~0.5 s
    wiped = threading.Event()

    def wiped_while_running() -> None:  # Redis restarted without persistence: every key is gone
        redis_client.flushdb()
        wiped.set()

    first_generation(monkeypatch, wiped_while_running)  # as the engine takes the request in
    # stopped once the keys are gone; the drain lets the running item finish and report
    sidecar = push_sidecar(redis_url, engine_url)  # heartbeats every 20 s: the completion comes first
    with caplog.at_level(logging.WARNING, logger="service.sidecar"):
        stats = run_until(sidecar, wiped.is_set)
    assert (stats.accepted, stats.stale) == (0, 1)  # counted, as the pull API's 404 tells its worker
    assert not any("will be redelivered" in r.getMessage() for r in caplog.records)  # it will not
    assert not any(r.levelno >= logging.ERROR for r in caplog.records)  # nothing for an operator to fix


def test_a_stop_whose_drain_time_redis_spent_exits_without_waiting_to_delete_its_presence_key(
    redis_client: redis.Redis, redis_url: str, engine_url: str
) -> None:
    """Deleting the presence key only spares the next process a wait, so it gets what is left of the
    drain's time and no more: with Redis stalled through the whole drain, the sidecar's run ends within
    ``drain_timeout_s + RELEASE_GRACE_S`` (the pod's grace period), not once Redis answers again."""
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "stall", {"w0": [item(f"p{i}", 0, 200_000 // 20) for i in range(2)]})
    both_started = asyncio.Event()
    holdings = Started(2, at=2, then=both_started.set)  # the stall comes before either ends
    sidecar = push_sidecar(redis_url, engine_url, drain_timeout_s=0.1, holdings=holdings)

    async def stopped_in_a_stall() -> tuple[SessionStats, float]:
        stop = asyncio.Event()
        run = asyncio.create_task(sidecar.run(stop))
        await asyncio.wait_for(both_started.wait(), 30.0)
        redis_client.client_pause(20_000, all=False)  # writes (the release, the key's delete) wait 20 s
        stopped = time.monotonic()
        stop.set()
        stats = await asyncio.wait_for(run, 30.0)
        took = time.monotonic() - stopped
        await sidecar.engine.aclose()
        return stats, took

    try:
        stats, took_s = asyncio.run(stopped_in_a_stall())
    finally:
        redis_client.client_unpause()
    # 0.1 s + RELEASE_GRACE_S (2 s), with slack for a loaded host; a delete sent past it waits on the
    # stalled Redis for the client's whole socket timeout (5 s) first
    assert took_s < 0.1 + RELEASE_GRACE_S + 2.5
    assert (stats.accepted, stats.released) == (0, 0)  # the release abandoned: the leases lapse

"""Real sidecar processes killed or paused mid-trajectory: nothing lost, nothing accepted twice.

Each test runs valkey-server, engine-sim servers and sidecars as separate processes on loopback,
with 1 s leases, and ends by printing the lost / accepted-twice counts it asserts are zero.
"""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

import httpx
import pytest
import redis

from service.delivery.protocol import Delivery
from service.embedded import EmbeddedServer
from tests.cluster import one_node_cluster
from tests.service.polling import poller
from tests.service.sidecar.procs import (
    PROCESS_START_S,
    bound_url,
    cluster,
    counters_line,
    item,
    publish,
    sigterm_with_redis_paused,
    tally,
    wait_finished,
    wait_until,
)
from tests.service.sidecar.spies import generation_at

pytestmark = pytest.mark.slow


def test_a_sigkilled_sidecar_s_claimed_items_are_all_redelivered_after_its_lease_lapses(
    redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    delivery = Delivery.from_url(redis_url)
    # An hour each on the victim's engine, ~0.3 s on the peer's: all six stay leased to the victim
    # until the kill, however late this test looks (at ~3 s each a poll stalled that long missed the
    # window, and waited out its bound). Its engine withdraws them when the kill closes their
    # connections; so it does the peer's items the victim stole meanwhile, which the peer then runs.
    victim_items = [item("victim", i, 4000) for i in range(6)]
    peer_items = [item("peer", i, 300) for i in range(4)]
    with cluster(tmp_path) as procs:
        urls = procs.engine_threads({"engine-victim": 120.0, "engine-peer": 0.01})
        victim = procs.sidecar("victim", urls["engine-victim"], redis_url)
        publish(delivery, "kill", {"victim": victim_items, "peer": peer_items})
        wait_until(lambda: _holds_its_own(delivery, "kill", "victim", 6), PROCESS_START_S, "all six leased")
        victim.signal(signal.SIGKILL)
        peer = procs.sidecar("peer", urls["engine-peer"], redis_url)
        wait_finished(delivery, "kill", PROCESS_START_S)  # the peer's start-up, then ~3 s of work
        peer.signal(signal.SIGTERM)
        peer_stats = peer.stats()
    results = {r.key: r for r in delivery.read_results("kill", count=100)}
    assert {k for k, r in results.items() if r.worker_id == "peer"} >= {i.key for i in victim_items}
    assert all(results[i.key].attempt == 2 for i in victim_items)
    assert peer_stats["stolen"] >= 6
    lost, twice = tally(delivery, "kill", {i.key for i in victim_items + peer_items})
    assert (lost, twice) == (0, 0)


def _holds_its_own(delivery: Delivery, schedule_id: str, worker: str, count: int) -> bool:
    """Whether ``worker`` leased the ``count`` items of its queue: none queued there, and it holds at
    least as many (a claim takes the own queue's head before it steals, so what it stole comes on top)."""
    progress = delivery.progress(schedule_id).workers[worker]
    return progress.queued == 0 and progress.running >= count


def test_a_sidecar_paused_past_its_lease_gets_nothing_accepted_and_the_item_runs_once(
    redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    delivery = Delivery.from_url(redis_url)
    slow = item("paused", 0, 6000)  # ~0.9 s on the paused sidecar's engine, within its 2 s lease
    with cluster(tmp_path) as procs:
        urls = procs.engine_threads({"engine-paused": 0.02, "engine-rescuer": 0.01})
        # Resumed, the process has its engine's reply waiting and a heartbeat overdue: the interval is
        # a third of the 2 s lease once a claim leased it (an interval past the TTL is not kept, and the
        # heartbeat re-reads it when a claim leases more), so either reaches Redis first. The late
        # completion is then refused as stale, or the heartbeat finds the lease gone and stops the item
        # (its completion never sent): both leave the paused process nothing accepted and the item run
        # once, by the rescuer. (Expecting the completion first failed ~1 run in 5 on a loaded host.)
        paused = procs.sidecar("paused", urls["engine-paused"], redis_url)
        publish(delivery, "pause", {"paused": [slow], "rescuer": []}, lease_ttl_ms=2000)
        wait_until(lambda: delivery.progress("pause").running == 1, PROCESS_START_S, "the item claimed")
        paused.signal(signal.SIGSTOP)
        rescuer = procs.sidecar("rescuer", urls["engine-rescuer"], redis_url)
        # the rescuer's start-up; the item reaped after 2 s, stolen and completed by it
        wait_finished(delivery, "pause", PROCESS_START_S)
        time.sleep(0.5)  # the paused sidecar's engine has long finished: its reply waits in the socket
        paused.signal(signal.SIGCONT)
        wait_until(
            lambda: _log_mentions(paused.log, "refused as stale", "lost; stopping it"), 40, "the end seen"
        )
        paused.signal(signal.SIGTERM)
        rescuer.signal(signal.SIGTERM)
        paused_stats, rescuer_stats = paused.stats(), rescuer.stats()
    assert paused_stats["stale"] + paused_stats["lost"] == 1
    assert paused_stats["accepted"] == 0
    assert rescuer_stats["accepted"] == 1
    assert [r.worker_id for r in delivery.read_results("pause")] == ["rescuer"]
    lost, twice = tally(delivery, "pause", {slow.key})
    assert (lost, twice) == (0, 0)


def _log_mentions(path: Path, *texts: str) -> bool:
    """Whether the log at ``path`` holds any of ``texts``."""
    return path.exists() and any(text in path.read_text() for text in texts)


def test_sigterm_lets_running_items_finish_and_leaves_the_rest_queued_for_others(
    redis_client: redis.Redis, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM as the second item reaches the engine (``generation_at``), both then started: sent once
    Redis counted two leases running, it came once (a run at load 11-40) before the sidecar had sent
    either to the engine, and both were released as unstarted ((0, 2) for (2, 0))."""
    delivery = Delivery.from_url(redis_url)
    items = [item("term", i, 12_000) for i in range(4)]  # ~1 s each
    with cluster(tmp_path) as procs:
        url = procs.engine_threads({"engine": 0.01})["engine"]
        sidecar = procs.sidecar("w0", url, redis_url, "--max-num-seqs", "2")
        generation_at(monkeypatch, 2, lambda: sidecar.signal(signal.SIGTERM))
        # leases long enough that a loaded host cannot let one lapse while the two items finish
        # (with the 1 s fault-test default, a clean-clone CI run under load saw one refused as stale)
        publish(delivery, "term", {"w0": items}, lease_ttl_ms=10_000)
        stats = sidecar.stats(PROCESS_START_S + 30.0)
        assert sidecar.popen.returncode == 0
    progress = delivery.progress("term")
    assert (stats["accepted"], stats["released"]) == (2, 0)
    assert (progress.done, progress.running, progress.queued) == (2, 0, 2)


@pytest.mark.parametrize("on_cluster", [False, True], ids=["plain", "cluster"])
def test_sigterm_while_redis_is_paused_exits_within_the_drain_timeout_plus_the_release_grace(
    tmp_path: Path, on_cluster: bool
) -> None:
    """docs/sidecar.md: the drain keeps to --drain-timeout plus 2 s even while Redis is down. With
    Redis paused (SIGSTOPped: connections accepted, nothing answered) the process exited 8.4 s after
    a SIGTERM with --drain-timeout 1: the presence key's delete got 2 s of its own after the release's
    2 s, and the exit then waited for the worker threads still reading the paused server's sockets
    (one 5 s socket timeout). On a cluster (``--cluster``, one node here) closing those sockets did not
    end the calls: the cluster client asked for the slot map again on new connections, and the
    counters came 8.1 s after the SIGTERM here (promise 3 s); the exit's hang-up refuses them now.

    The bound is read at the counters' line on stdout, printed once the drain and those waits are
    over: what comes after it is the interpreter's teardown, a fraction of a second of CPU that 24
    busy processes on 2 cores stretched past 20 s (a faulthandler dump found it garbage-collecting).
    A sidecar killed by its pod's grace period there has nothing left to lose.

    The items must outlast the shutdown: capped at 16,000 tokens (``item``'s ``max_new_tokens``), they
    took ~1.25 s on a 0.01 engine, and a SIGTERM that a loaded host sent 0.25 s late let both finish
    inside the 1 s drain, their completions then left to lapse unanswered (lost, no "could not release"
    line: a fresh-clone CI run at load ~14). At 0.2 they take ~25 s. Either way each lease ends
    ``lost``, the counter docs/sidecar.md promises for what Redis never answered: that is asserted."""
    server = one_node_cluster() if on_cluster else EmbeddedServer().start()
    try:
        delivery = Delivery.from_url(server.url, cluster=on_cluster)
        with cluster(tmp_path) as procs:
            url = procs.engine_threads({"engine": 0.2})["engine"]  # ~25 s an item
            flags = ["--max-num-seqs", "2", "--drain-timeout", "1", *(["--cluster"] if on_cluster else [])]
            sidecar = procs.sidecar("w0", url, server.url, *flags)
            publish(delivery, "paused", {"w0": [item(f"p{i}", 0, 200_000) for i in range(2)]}, 30_000)
            # Both on the engine, not only leased in Redis: a loaded sidecar's claim can be leased there
            # and still waiting on its reply at the pause, abandoned then (no lease held to hand back).
            with poller(5.0) as http:
                wait_until(lambda: _engine_running(http, url) == 2, 180, "both running on the engine")
            counters, took_s = sigterm_with_redis_paused(server, sidecar)
        assert sidecar.popen.returncode == 0
        assert counters.startswith("{"), f"no counters printed; log:\n{sidecar.log.read_text()[-3000:]}"
        # both leases left to lapse, whether running, not started yet or finished unanswered
        stats = json.loads(counters)
        ends = (stats["accepted"], stats["released"], stats["lost"])
        assert ends == (0, 0, 2), f"{counters}\n{sidecar.log.read_text()[-4000:]}"
        assert took_s < 1.0 + 2.0 + 2.0  # drain timeout, release grace, and an exit's slack
    finally:
        server.stop()


def _engine_running(http: httpx.Client, engine_url: str) -> int:
    """How many requests the engine-sim is generating now (``http``: a wait's one client, not an
    ``httpx.get`` per ask, ~35 ms of CPU each: tests.service.polling)."""
    return int(http.get(f"{engine_url}/sim/stats").json()["running"])


def test_a_second_sigterm_cuts_the_drain_short_and_releases_the_running_items_at_once(
    redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    """A second SIGTERM (or Ctrl-C) was ignored: the sidecar waited out the whole drain timeout
    (20 s here) before it released items that needed longer."""
    delivery = Delivery.from_url(redis_url)
    with cluster(tmp_path) as procs:
        url = procs.engine_threads({"engine": 0.2})["engine"]  # ~25 s an item
        sidecar = procs.sidecar("w0", url, redis_url, "--max-num-seqs", "2", "--drain-timeout", "20")
        publish(delivery, "twice", {"w0": [item(f"p{i}", 0, 200_000) for i in range(2)]}, 30_000)
        # Both on the engine, not only leased in Redis: a SIGTERM between a lease and its start hands
        # the item back unstarted, with no drain to log (a fresh-clone CI run at full load, round 59).
        with poller(5.0) as http:
            wait_until(lambda: _engine_running(http, url) == 2, 180, "both running on the engine")
        sidecar.signal(signal.SIGTERM)
        wait_until(lambda: _log_mentions(sidecar.log, "draining 2 running items"), 10, "the drain")
        stopped = time.monotonic()
        sidecar.signal(signal.SIGTERM)
        counters = counters_line(sidecar)  # the interpreter's teardown after it is no drain's
        took_s = time.monotonic() - stopped
        sidecar.popen.wait(timeout=120)
    assert sidecar.popen.returncode == 0
    stats = json.loads(counters)
    assert took_s < 20.0 / 2  # not the 20 s drain
    assert (stats["accepted"], stats["released"]) == (0, 2)
    assert delivery.progress("twice").queued == 2


def test_items_on_a_sigstopped_engine_go_back_and_the_sidecar_reports_its_engine_down(
    redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    delivery = Delivery.from_url(redis_url)
    items = [item("frozen", i, 100_000) for i in range(4)]  # minutes each: they run when it stops
    with cluster(tmp_path) as procs:
        engine = procs.engines({"engine": ("H100", 0.01)})["engine"]
        flags = ["--engine-stall-timeout", "2", "--health-port", "0"]
        sidecar = procs.sidecar("w0", engine, redis_url, *flags)
        health = bound_url(sidecar)  # the kernel's pick
        publish(delivery, "sigstop", {"w0": items}, lease_ttl_ms=10_000)
        wait_until(lambda: delivery.progress("sigstop").running == 4, PROCESS_START_S, "all four running")
        procs.procs[0].signal(signal.SIGSTOP)  # the engine-sim process
        # the sidecar's own count of the hand-back Redis took (the stall timeout, 2 s, and a probe on);
        # a bound against never, not a speed
        with poller(5.0) as http:
            wait_until(lambda: _released(http, health) == 4, PROCESS_START_S, "the items handed back")
        assert delivery.progress("sigstop").queued == 4
        body = httpx.get(f"{health}/health", timeout=5).json()
        assert (body["status"], body["engine_up"], body["held"]) == ("ok", False, 0)
        procs.procs[0].signal(signal.SIGCONT)
        sidecar.signal(signal.SIGTERM)
        stats = sidecar.stats()
    assert (stats["released"], stats["failed"]) == (4, 0)


def _released(http: httpx.Client, health: str) -> int:
    """The sidecar's ``released`` counter, read from its ``/metrics`` (``health``: the probes' URL;
    ``http``: the wait's one client)."""
    text = http.get(f"{health}/metrics").text
    found = re.search(r"^rollout_sidecar_released_total\{[^}]*\} (\S+)$", text, re.MULTILINE)
    return int(float(found.group(1))) if found else 0


def test_sidecars_ride_out_a_redis_crash_and_aof_restart_losing_nothing(tmp_path: Path) -> None:
    server = EmbeddedServer(appendonly=True).start()
    try:
        delivery = Delivery.from_url(server.url)
        queues = {w: [item(f"{w}-{i}", 0, 3000) for i in range(8)] for w in ("w0", "w1")}  # ~0.25 s each
        with cluster(tmp_path) as procs:
            urls = procs.engine_threads({"w0": 0.01, "w1": 0.01})
            sidecars = [procs.sidecar(w, urls[w], server.url, "--max-num-seqs", "2") for w in queues]
            publish(delivery, "restart", queues, lease_ttl_ms=2000)
            wait_until(lambda: delivery.progress("restart").done >= 4, PROCESS_START_S)
            server.kill()
            time.sleep(1.0)  # completions and claims fail meanwhile; the sidecars retry
            server.start()
            wait_finished(delivery, "restart", 60)
            assert all(s.popen.poll() is None for s in sidecars)  # nobody crashed on the outage
            assert any(_log_mentions(s.log, "redis unavailable") for s in sidecars)  # they did see it
            for sidecar in sidecars:
                sidecar.signal(signal.SIGTERM)
            for sidecar in sidecars:
                sidecar.stats()
                assert sidecar.popen.returncode == 0
        lost, twice = tally(delivery, "restart", {i.key for q in queues.values() for i in q})
        assert (lost, twice) == (0, 0)
    finally:
        server.stop()

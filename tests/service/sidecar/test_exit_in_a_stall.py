"""A sidecar told to stop while Redis is stalled exits within the drain timeout plus the release grace.

docs/sidecar.md promises the exit keeps to ``--drain-timeout`` plus 2 s even while Redis is down or
paused (connections accepted, nothing answered). A Redis call runs in a worker thread, and one
nobody stops goes on until the server answers or the client's socket timeout (5 s) runs out: an
idle push sidecar's claim held its drain's start back that long, and a pull sidecar's exit waited
for the calls its shutdown had abandoned. The bounds below are the promise plus 2 s of slack for a
loaded host; before the fixes each run took the whole stall (push) or a socket timeout (pull) more.
"""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import time
from pathlib import Path

import httpx
import pytest
import redis

from service.delivery.protocol import Delivery
from service.delivery.stored import REPLY_DECODING
from service.embedded import EmbeddedServer
from service.redis_conn import VersionCheck
from service.sidecar.engine_client import EngineClient, EngineOptions
from service.sidecar.holdings import Holdings
from service.sidecar.runner import RunnerSettings, Sidecar
from service.sidecar.session import RELEASE_GRACE_S, SessionSettings, WorkerSession
from tests.cluster import one_node_cluster
from tests.service.sidecar.procs import (
    bound_url,
    cluster,
    item,
    publish,
    sigterm_with_redis_paused,
    wait_http,
    wait_until,
)

SLACK_S = 2.0  # a loaded host's lateness, well short of what a stalled call costs (5 s, or the stall)


def test_an_idle_push_sidecar_stopped_while_its_claim_waits_on_a_stalled_redis_keeps_to_the_drain(
    redis_client: redis.Redis, redis_url: str, engine_url: str
) -> None:
    """The main loop awaited the claim in flight before it looked at the stop: with Redis stalled
    (writes paused for 20 s here, a claim is a script that writes) it began its drain only when the
    claim came back, once Redis answered or the client's socket timeout ran out (5 s in the
    sidecar's client; longer here, so that the wait before the fix is the whole stall, unmistakable)."""
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "idle", {"w0": [], "w1": [item("theirs", 0, 10)]})  # w0's claims find nothing
    client = redis.Redis.from_url(redis_url, socket_timeout=60, **REPLY_DECODING)  # outlasts the stall
    session = WorkerSession(Delivery(client), Holdings(2), SessionSettings("w0", steal=False))
    settings = RunnerSettings(idle_poll_s=0.02, drain_timeout_s=0.1)
    sidecar = Sidecar(session, EngineClient.open(EngineOptions(engine_url)), settings)

    async def stopped_while_claiming() -> float:
        stop = asyncio.Event()
        run = asyncio.create_task(sidecar.run(stop))
        while not sidecar.engine_up or sidecar.redis_up is False:  # claiming, and Redis answered
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)  # a few idle claims
        redis_client.client_pause(20_000, all=False)
        try:
            await asyncio.sleep(0.3)  # the next claim is sent, and waits
            stopped = time.monotonic()
            stop.set()
            await asyncio.wait_for(run, 30.0)
            return time.monotonic() - stopped
        finally:
            redis_client.client_unpause()  # the abandoned calls' threads end, and asyncio.run returns
            await sidecar.engine.aclose()

    took_s = asyncio.run(stopped_while_claiming())
    assert took_s < 0.1 + RELEASE_GRACE_S + SLACK_S
    assert delivery.progress("idle").queued == 1  # the claim abandoned took nothing


def test_what_a_claim_cut_short_by_the_stop_leases_once_redis_answers_is_handed_back_unstarted(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """The stop no longer waits for a claim in flight, but the drain does, within its time: the leases
    it brings are released (no attempt spent) with the rest, not sent to the engine, nor left leased to
    a sidecar on its way out."""
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "landed", {"w0": [item("a", 0, 10), item("b", 0, 10)]}, lease_ttl_ms=30_000)
    ready, generations = [False], []

    def engine(request: httpx.Request) -> httpx.Response:  # loading until ``ready``; never answers work
        if request.url.path == "/v1/models":
            models = {"data": [{"id": "m", "max_model_len": 32768}]}
            return httpx.Response(200, json=models) if ready[0] else httpx.Response(503)
        if request.url.path == "/health":
            return httpx.Response(200)
        generations.append(request.url.path)
        return httpx.Response(503)

    session = WorkerSession(Delivery.from_url(redis_url), Holdings(2), SessionSettings("w0"))
    http = httpx.AsyncClient(transport=httpx.MockTransport(engine), base_url="http://engine")
    client = EngineClient(EngineOptions("http://engine", synthetic_prompts=True), http)
    sidecar = Sidecar(
        session, client, RunnerSettings(idle_poll_s=0.02, drain_timeout_s=10, engine_wait_s=0.05)
    )

    async def stopped_while_claiming() -> None:
        stop = asyncio.Event()
        run = asyncio.create_task(sidecar.run(stop))
        await sidecar.takeover.done.wait()
        redis_client.client_pause(1_500, all=False)  # the claim's script waits 1.5 s
        ready[0] = True
        while not sidecar.engine_up:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)  # the claim is sent, and waits
        stop.set()
        await asyncio.wait_for(run, 30.0)
        await http.aclose()

    asyncio.run(stopped_while_claiming())
    progress = delivery.progress("landed")
    assert (session.stats.claimed, session.stats.released) == (2, 2)
    assert (progress.queued, progress.running) == (2, 0)
    assert generations == []  # released unstarted, not run on an engine being left


def test_a_push_sidecar_stopped_while_it_probes_a_frozen_engine_does_not_wait_out_the_probe(
    redis_url: str,
) -> None:
    """Beside a frozen engine (its kernel accepts the connection, nothing answers: a SIGSTOPped
    engine) the main loop's readiness probe waits out its timeout (``min(5 s, --engine-stall-timeout
    / 4)`` in the command; 60 s here, so the wait before the fix is unmistakable). A stop that came
    while it was out began the drain only once it timed out; the probe is cancelled at the stop now."""
    frozen = socket.create_server(("127.0.0.1", 0))  # listens, accepts (the backlog), never reads
    engine_url = f"http://127.0.0.1:{frozen.getsockname()[1]}"
    session = WorkerSession(Delivery.from_url(redis_url), Holdings(2), SessionSettings("w0"))
    engine = EngineClient.open(EngineOptions(engine_url, probe_timeout_s=60))
    sidecar = Sidecar(session, engine, RunnerSettings(idle_poll_s=0.02, drain_timeout_s=0.1))

    async def stopped_while_probing() -> float:
        stop = asyncio.Event()
        run = asyncio.create_task(sidecar.run(stop))
        await sidecar.takeover.done.wait()
        await asyncio.sleep(0.3)  # the first readiness probe is out, and waits
        stopped = time.monotonic()
        stop.set()
        try:
            await asyncio.wait_for(run, 30.0)
        finally:
            await engine.aclose()
        return time.monotonic() - stopped

    try:
        took_s = asyncio.run(stopped_while_probing())
    finally:
        frozen.close()
    assert not sidecar.engine_up  # the probe never answered
    assert took_s < 0.1 + RELEASE_GRACE_S + SLACK_S


@pytest.mark.slow
def test_the_drain_counts_from_the_stop_when_the_engine_goes_down_as_redis_stalls(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """The engine fails the running item and stops listing its model while Redis stalls (writes
    paused): the main loop hands back the lease that waited to start (KV admission), a release bounded
    by the release grace, not by the stop. A stop during it began the drain's whole time, and the
    presence key's delete its grace, only after it: the grace twice past the drain timeout. The
    drain's clock starts at the stop now, one deadline for the whole shutdown. The grace is 5 s here
    (2 s in the command), so the overrun before the fix (the grace again) is unmistakable."""
    delivery = Delivery.from_url(redis_url)
    items = {"w0": [item("a", 0, 10), item("b", 0, 10)]}  # 110 KV tokens each: one fits at a time
    publish(delivery, "both", items, lease_ttl_ms=30_000, kv_admission=True)
    down = asyncio.Event()

    async def engine(request: httpx.Request) -> httpx.Response:  # serves until ``down``, then 503s
        if request.url.path in ("/v1/models", "/health") and not down.is_set():
            models = {"data": [{"id": "m", "max_model_len": 32768}]}
            return httpx.Response(200, json=models)
        await down.wait()  # a generation waits for the engine to go down, then fails
        return httpx.Response(503)

    client = redis.Redis.from_url(redis_url, socket_timeout=60, **REPLY_DECODING)  # outlasts the stall
    session = WorkerSession(Delivery(client), Holdings(2, kv_capacity_tokens=150), SessionSettings("w0"))
    http = httpx.AsyncClient(transport=httpx.MockTransport(engine), base_url="http://engine")
    engine_client = EngineClient(EngineOptions("http://engine", synthetic_prompts=True), http)
    grace_s, drain_s = 5.0, 0.1
    settings = RunnerSettings(
        idle_poll_s=0.02,
        drain_timeout_s=drain_s,
        engine_wait_s=0.05,
        engine_retries=0,
        release_grace_s=grace_s,
    )
    sidecar = Sidecar(session, engine_client, settings)

    async def stopped_while_handing_back() -> float:
        stop = asyncio.Event()
        run = asyncio.create_task(sidecar.run(stop))
        while len(session.holdings) < 2:  # a runs, b waits for KV room
            await asyncio.sleep(0.02)
        assert len(session.holdings.waiting()) == 1
        redis_client.client_pause(30_000, all=False)
        try:
            down.set()
            while session.holdings.waiting():  # b's hand-back is sent, and waits on Redis
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.2)
            stopped = time.monotonic()
            stop.set()
            await asyncio.wait_for(run, 60.0)
            return time.monotonic() - stopped
        finally:
            redis_client.client_unpause()  # the abandoned calls' threads end, and asyncio.run returns
            await http.aclose()

    took_s = asyncio.run(stopped_while_handing_back())
    assert took_s < drain_s + grace_s + SLACK_S


def test_a_push_sidecar_started_while_redis_is_paused_is_stopped_within_its_drain() -> None:
    """A plain Redis down at start-up leaves its version to be asked before the first claim
    (``launch.connected``); the main loop's check of a server that accepts and does not answer
    (SIGSTOPped here) waits out the client's socket timeout (5 s in the command, 60 s here). It gives
    way to the stop: nothing was claimed, so the drain has nothing to wait for.

    The takeover asks the same check first, and whichever asks second waits only for its lock (1 s,
    ``VERSION_WAIT_S``): the takeover's own check is left out, so that the main loop's is the one
    waiting on the server."""
    server = EmbeddedServer().start()
    try:
        client = redis.Redis.from_url(server.url, socket_timeout=60, **REPLY_DECODING)
        session = WorkerSession(Delivery(client), Holdings(2), SessionSettings("w0"))
        engine = EngineClient.open(EngineOptions("http://127.0.0.1:9"))  # never reached: Redis first
        settings = RunnerSettings(idle_poll_s=0.02, drain_timeout_s=0.1)
        sidecar = Sidecar(session, engine, settings, version=VersionCheck(client, server.url))
        sidecar.takeover.version = None

        async def stopped_while_asking() -> float:
            stop = asyncio.Event()
            run = asyncio.create_task(sidecar.run(stop))
            await asyncio.sleep(0.5)  # the check is sent, and waits
            stopped = time.monotonic()
            stop.set()
            try:
                await asyncio.wait_for(run, 30.0)
            finally:
                server.signal(signal.SIGCONT)  # the abandoned calls' threads end, and asyncio.run returns
                await engine.aclose()
            return time.monotonic() - stopped

        server.signal(signal.SIGSTOP)
        try:
            took_s = asyncio.run(stopped_while_asking())
        finally:
            server.signal(signal.SIGCONT)
        assert took_s < 0.1 + RELEASE_GRACE_S + SLACK_S
    finally:
        server.stop()


@pytest.mark.slow
@pytest.mark.parametrize("on_cluster", [False, True], ids=["plain", "cluster"])
def test_a_pull_sidecar_sigtermed_while_redis_is_paused_exits_within_the_drain_timeout_plus_the_grace(
    tmp_path: Path, on_cluster: bool
) -> None:
    """The pull API's shutdown hands back what the worker holds within the grace, then deletes its
    presence key with what is left of it; with Redis SIGSTOPped both were abandoned in time, but the
    process then waited for their threads, still reading the paused server's sockets, one socket
    timeout (5 s) from the first call: 5.2 s after SIGTERM with --drain-timeout 0 (promise 2 s).
    Against a cluster (``--cluster``, one node here) closing the connections did not end those calls:
    the cluster client asked the node for its slot map again, on new connections, and the counters
    came 10 s late (two socket timeouts); the hang-up now refuses every later call.

    Timed to the counters line as the push test in test_process_faults: what follows it is the
    interpreter's teardown."""
    server = one_node_cluster() if on_cluster else EmbeddedServer().start()
    try:
        delivery = Delivery.from_url(server.url, cluster=on_cluster)
        with cluster(tmp_path) as procs:
            flags = ["--pull-api", "0", "--redis-url", server.url, "--drain-timeout", "0"]
            flags += ["--cluster"] if on_cluster else []
            sidecar = procs.spawn("sidecar-w0", ["sidecar", "--worker-id", "w0", *flags])
            base = bound_url(sidecar)  # the kernel's pick
            wait_http(f"{base}/ready", sidecar, 120)
            publish(delivery, "paused", {"w0": [item(f"p{i}", 0, 10) for i in range(2)]}, 30_000)
            for _ in range(2):  # the worker holds both
                assert httpx.get(f"{base}/next?wait_s=10", timeout=60).status_code == 200
            wait_until(lambda: delivery.progress("paused").running == 2, 60, "both leased")
            counters, took_s = sigterm_with_redis_paused(server, sidecar)
        assert sidecar.popen.returncode == 0
        assert counters.startswith("{"), f"no counters printed; log:\n{sidecar.log.read_text()[-3000:]}"
        assert re.findall(r"could not release (\d+) leases", sidecar.log.read_text()) == ["2"]  # to lapse
        assert took_s < 0.0 + RELEASE_GRACE_S + SLACK_S
    finally:
        server.stop()


@pytest.mark.slow
def test_a_push_sidecar_started_while_redis_was_down_then_sigtermed_with_it_paused_exits_in_time(
    tmp_path: Path, held_redis_port: int
) -> None:
    """Redis down at start-up (nothing on its port), then up but SIGSTOPped: the main loop and the
    takeover ask its version, one on the server (5 s socket timeout), the other waiting for it. The
    exit closed the first's connection, and the waiting one then asked the server again, on a new
    connection: the counters came 5 s after SIGTERM with --drain-timeout 0 (promise 2 s). A check
    that failed is now the waiting one's answer too (``redis_conn.VersionCheck``)."""
    port = held_redis_port  # for the server started below: no other server takes it first
    with cluster(tmp_path) as procs:
        engine = procs.engine_threads({"engine": 0.01})["engine"]
        redis_url = f"redis://127.0.0.1:{port}/0"
        sidecar = procs.sidecar("w0", engine, redis_url, "--drain-timeout", "0")
        wait_until(lambda: "redis unavailable" in sidecar.log.read_text(), 120, "running, Redis down")
        server = EmbeddedServer(port=port).start()
        try:  # SIGTERM 0.6 s in: the next checks, one waiting on the server, the other for its answer
            counters, took_s = sigterm_with_redis_paused(server, sidecar, settle_s=0.6)
        finally:
            server.stop()
    assert sidecar.popen.returncode == 0
    assert counters.startswith("{"), f"no counters printed; log:\n{sidecar.log.read_text()[-3000:]}"
    assert took_s < 0.0 + RELEASE_GRACE_S + SLACK_S

"""A second SIGTERM or SIGINT ends a sidecar's shutdown within the release grace of it, Redis answering
or not; what Redis did not take by then lapses, counted ``lost`` (service/sidecar/hurry.py).

The first signal drains for ``--drain-timeout`` (20 s here), and the hand-backs after it get the
release grace. A second signal (a second Ctrl-C, an operator's second ``kill``) stopped the running
items, but a hand-back or claim waiting on a stalled Redis (SIGSTOPped: connections accepted, nothing
answered) still waited for the first signal's deadline plus the grace: ~21 s after the second signal
in these tests. In pull mode a second SIGTERM did nothing, and a second SIGINT (uvicorn's
``force_exit``) skipped the hand-back altogether: the held leases were counted nowhere. Bounds are
the grace plus a loaded host's slack, far from what they guard against.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from service.delivery.protocol import Delivery
from service.delivery.stored import REPLY_DECODING
from service.embedded import EmbeddedServer
from service.sidecar.engine_client import EngineClient, EngineOptions
from service.sidecar.holdings import Holdings
from service.sidecar.runner import RunnerSettings, Sidecar
from service.sidecar.session import RELEASE_GRACE_S, SessionSettings, WorkerSession
from tests.service.polling import poller
from tests.service.sidecar.procs import (
    PROCESS_START_S,
    Proc,
    bound_url,
    cluster,
    counters_line,
    item,
    publish,
    wait_http,
    wait_until,
)
from tests.service.sidecar.pullclient import report_body

DRAIN_S = 20.0  # the first signal's drain: what the second must not wait out
SLACK_S = 2.0  # a loaded host's lateness
SECONDS = [signal.SIGTERM, signal.SIGINT]
IDS = ["second SIGTERM", "second SIGINT"]


def _second_signal(server: EmbeddedServer, sidecar: Proc, second: int) -> tuple[dict[str, int], float]:
    """Send ``sidecar`` its second signal while ``server`` is SIGSTOPped, and a third once it has
    warned of the second: its counters and the seconds from the second signal to them. Redis is
    resumed, and the sidecar reaped, whatever happens."""
    try:
        time.sleep(0.3)  # what is waiting on Redis is sent, and waits
        hurried = time.monotonic()
        sidecar.signal(signal.Signals(second))
        said = "second signal"
        wait_until(lambda: said in sidecar.log.read_text(), PROCESS_START_S, "the second signal's warning")
        sidecar.signal(signal.Signals(second))  # a third: nothing more to hurry (docs/sidecar.md)
        counters = counters_line(sidecar)
        took_s = time.monotonic() - hurried
        sidecar.popen.wait(timeout=120)
    finally:
        server.signal(signal.SIGCONT)
    assert counters.startswith("{"), f"no counters printed; log:\n{sidecar.log.read_text()[-3000:]}"
    assert sidecar.log.read_text().count("second signal:") == 1  # the third said and did nothing
    return json.loads(counters), took_s


def _abandoned(log: Path) -> int:
    """How many leases the log says were left to lapse, over every "could not release N" line."""
    return sum(int(n) for n in re.findall(r"could not release (\d+) leases", log.read_text()))


def _engine_running(http: httpx.Client, engine_url: str) -> int:
    """How many requests the engine-sim is generating now (``http``: a wait's one client, not an
    ``httpx.get`` per ask, ~35 ms of CPU each: tests.service.polling)."""
    return int(http.get(f"{engine_url}/sim/stats").json()["running"])


@pytest.mark.slow
@pytest.mark.parametrize("second", SECONDS, ids=IDS)
def test_a_push_sidecar_s_second_signal_ends_its_drain_within_the_grace_with_redis_paused(
    tmp_path: Path, second: int
) -> None:
    """Both items still run when the second signal stops them; their hand-back waits on the paused
    Redis, and is given up at the grace: both lapse, counted lost, exit 0."""
    server = EmbeddedServer().start()
    try:
        delivery = Delivery.from_url(server.url)
        with cluster(tmp_path) as procs:
            url = procs.engine_threads({"engine": 0.2})["engine"]  # ~25 s an item: both run past the signals
            flags = ["--max-num-seqs", "2", "--drain-timeout", str(DRAIN_S)]
            sidecar = procs.sidecar("w0", url, server.url, *flags)
            publish(delivery, "twice", {"w0": [item(f"p{i}", 0, 200_000) for i in range(2)]}, 30_000)
            with poller(5.0) as http:
                wait_until(
                    lambda: _engine_running(http, url) == 2, PROCESS_START_S, "both running on the engine"
                )
            sidecar.signal(signal.SIGTERM)
            drain = "draining 2 running items"
            wait_until(lambda: drain in sidecar.log.read_text(), PROCESS_START_S, "the drain")
            server.signal(signal.SIGSTOP)
            stats, took_s = _second_signal(server, sidecar, second)
        assert sidecar.popen.returncode == 0
        assert (stats["claimed"], stats["accepted"], stats["released"], stats["lost"]) == (2, 0, 0, 2)
        assert _abandoned(sidecar.log) == 2
        assert took_s < RELEASE_GRACE_S + SLACK_S  # not the first signal's drain and grace (~21 s)
    finally:
        server.stop()


@pytest.mark.slow
@pytest.mark.parametrize("second", SECONDS, ids=IDS)
def test_a_pull_sidecar_s_second_signal_gives_up_its_requests_and_hands_back_within_the_grace(
    tmp_path: Path, second: int
) -> None:
    """The worker holds two leases and reports one while Redis is paused: the ``/done`` retries
    through the outage, and the first signal's drain waits for it (20 s). The second signal answers it 503
    at once, and the hand-back of both is given up at the grace: both lapse, counted lost, exit 0."""
    server = EmbeddedServer().start()
    try:
        delivery = Delivery.from_url(server.url)
        with cluster(tmp_path) as procs, ThreadPoolExecutor(1) as worker:
            flags = ["--pull-api", "0", "--redis-url", server.url, "--drain-timeout", str(DRAIN_S)]
            sidecar = procs.spawn("sidecar-w0", ["sidecar", "--worker-id", "w0", *flags])
            base = bound_url(sidecar)  # the kernel's pick
            wait_http(f"{base}/ready", sidecar, PROCESS_START_S)
            publish(delivery, "twice", {"w0": [item(f"p{i}", 0, 10) for i in range(2)]}, 30_000)
            leases = [httpx.get(f"{base}/next?wait_s=10", timeout=60).json() for _ in range(2)]
            server.signal(signal.SIGSTOP)
            try:
                done = worker.submit(_post, f"{base}/done", report_body("done", leases[0]))
                # in flight once its first try timed out on the paused server (5 s) and it retries: a
                # report not yet accepted at the SIGTERM finds the server's socket closed
                retrying = "redis unavailable during"
                wait_until(lambda: retrying in sidecar.log.read_text(), PROCESS_START_S, "the /done retrying")
                sidecar.signal(signal.SIGTERM)  # the drain waits for it
            except BaseException:
                server.signal(signal.SIGCONT)
                raise
            stats, took_s = _second_signal(server, sidecar, second)
            answer = done.result(timeout=60)
        assert sidecar.popen.returncode == 0
        assert answer.status_code == 503
        assert "at a second signal" in answer.json()["error"]
        assert (stats["claimed"], stats["accepted"], stats["released"], stats["lost"]) == (2, 0, 0, 2)
        assert took_s < RELEASE_GRACE_S + SLACK_S  # not the drain timeout and the grace (~21 s)
    finally:
        server.stop()


def _post(url: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(url, json=body, timeout=120)


def test_a_second_signal_abandons_a_claim_still_waiting_on_a_stalled_redis_at_once(
    redis_client: redis.Redis, redis_url: str, engine_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An idle push sidecar stopped while its claim waits on Redis (writes paused 30 s; the client's
    socket timeout 60 s) waits for that claim up to its drain timeout: a second signal abandoned
    nothing there, and the exit came 20 s later. What the claim may yet lease lapses and is requeued."""
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "idle", {"w0": [], "w1": [item("theirs", 0, 10)]})  # w0's claims find nothing
    client = redis.Redis.from_url(redis_url, socket_timeout=60, **REPLY_DECODING)  # outlasts the pause
    session = WorkerSession(Delivery(client), Holdings(2), SessionSettings("w0", steal=False))
    settings = RunnerSettings(idle_poll_s=0.02, drain_timeout_s=DRAIN_S)
    sidecar = Sidecar(session, EngineClient.open(EngineOptions(engine_url)), settings)

    async def hurried_while_claiming() -> float:
        stop = asyncio.Event()
        run = asyncio.create_task(sidecar.run(stop))
        while not sidecar.engine_up or sidecar.redis_up is False:  # claiming, and Redis answered
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)  # a few idle claims
        redis_client.client_pause(30_000, all=False)
        try:
            await asyncio.sleep(0.2)  # a claim sent before the pause has come back
            while not sidecar._claiming.locked():  # the next claim is sent, and waits
                await asyncio.sleep(0.01)
            stop.set()  # the first signal: the claim is left to the drain
            await asyncio.sleep(0.3)
            hurried = time.monotonic()
            sidecar.hurry.set()  # the second (``launch._on_signal``)
            await asyncio.wait_for(run, 60.0)
            return time.monotonic() - hurried
        finally:
            redis_client.client_unpause()
            await sidecar.engine.aclose()

    took_s = asyncio.run(hurried_while_claiming())
    assert "a claim still waiting on Redis was abandoned" in caplog.text
    assert took_s < RELEASE_GRACE_S + SLACK_S  # not the 20 s drain timeout

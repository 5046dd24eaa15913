"""The pull API while Redis is down: a report it could not deliver answers 503 and keeps the lease.

docs/sidecar.md promises a worker told 503 (with ``Retry-After``) that its lease is kept and the
retry is safe. The sidecar used to forget the lease the moment the report failed: ``/leases`` no
longer listed it, its heartbeats stopped (it lapsed a TTL later and cost an attempt), and a
retried ``/fail`` was answered ``stale`` although the item still sat leased to this worker in Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from service.delivery.protocol import Delivery
from service.embedded import EmbeddedServer
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.bound_port import child_port
from tests.service.polling import until_status
from tests.service.sidecar.procs import PROCESS_START_S, item, publish, wait_until
from tests.service.sidecar.pullclient import with_api


@pytest.fixture
def aof_server() -> Iterator[EmbeddedServer]:
    """A private server with AOF on, so a SIGKILL and restart keep every acknowledged write."""
    with EmbeddedServer(appendonly=True) as server:
        yield server


def _ref(lease: dict[str, Any]) -> dict[str, Any]:
    return {name: lease[name] for name in ("schedule_id", "key", "token")}


def test_a_report_redis_did_not_take_keeps_its_lease_and_its_retry_lands(aof_server: EmbeddedServer) -> None:
    delivery = Delivery.from_url(aof_server.url)
    publish(delivery, "outage", {"w0": [item("a", 0, 10), item("b", 0, 10)]}, lease_ttl_ms=600_000)
    client = redis.Redis.from_url(aof_server.url, decode_responses=True, retry=None)  # no retries of its own
    session = WorkerSession(Delivery(client), Holdings(4), SessionSettings("w0", retry_for_s=0.2))

    async def script(api: httpx.AsyncClient) -> list[Any]:
        done, failed = [(await api.get("/next")).json() for _ in range(2)]
        aof_server.kill()
        refused = [
            await api.post("/done", json={**_ref(done), "output_tokens": 5}),
            await api.post("/fail", json={**_ref(failed), "reason": "engine crashed"}),
        ]
        kept = sorted(lease["key"] for lease in (await api.get("/leases")).json()["held"])
        await asyncio.to_thread(aof_server.start)
        retried = [
            (await api.post("/done", json={**_ref(done), "output_tokens": 5})).json(),
            (await api.post("/fail", json={**_ref(failed), "reason": "engine crashed"})).json(),
        ]
        told = [(answer.status_code, answer.headers.get("Retry-After")) for answer in refused]
        return [told, kept, retried, (await api.get("/leases")).json()["held"]]

    assert with_api(aof_server.url, script, session=session) == [
        [(503, "1"), (503, "1")],  # retry in a second: the lease is kept for it
        ["a#0", "b#0"],
        [{"outcome": "accepted"}, {"outcome": "requeued"}],
        [],
    ]
    progress = delivery.progress("outage")
    assert (progress.done, progress.queued, progress.running) == (1, 1, 0)
    assert (session.stats.accepted, session.stats.failed) == (1, 1)


@pytest.mark.timeout(PROCESS_START_S + 90)  # the start (its imports at load ~30: ~1-2 min), then its waits
def test_sigterm_ends_a_report_stuck_on_redis_at_the_drain_timeout_and_hands_back_what_was_held(
    aof_server: EmbeddedServer,
) -> None:
    """uvicorn waited without end for the requests in flight: a /done retrying through the outage
    held the process for its whole retry window (a minute), far past ``--drain-timeout`` plus 2 s;
    then its cut logged two errors for a shutdown that did what it promises (``pull_drain``)."""
    delivery = Delivery.from_url(aof_server.url)
    publish(delivery, "drain", {"w0": [item("a", 0, 10), item("b", 0, 10)]}, lease_ttl_ms=600_000)
    command = [sys.executable, "-m", "service.cli", "sidecar", "--worker-id", "w0", "--pull-api", "0"]
    command += ["--redis-url", aof_server.url, "--drain-timeout", "1"]
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("ROLLOUT_")}
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr or []), daemon=True)
    try:
        base = f"http://127.0.0.1:{child_port(proc, 30)}"  # the kernel's pick (tests.service.bound_port)
        until_status(f"{base}/ready", 200, proc, timeout_s=30)
        first = httpx.get(f"{base}/next", timeout=5.0).json()
        httpx.get(f"{base}/next", timeout=5.0)
        reader.start()
        aof_server.kill()
        body = {**_ref(first), "output_tokens": 5}
        report = threading.Thread(target=_post_quietly, args=(f"{base}/done", body), daemon=True)
        report.start()
        wait_until(lambda: any("during complete" in line for line in lines), 30, "the /done met the outage")
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)  # a guard: the drain timeout is 1 s, the /done's retry window 60 s
        reader.join(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    assert any("could not release 2 leases" in line for line in lines)  # the cut-short /done's too
    # a clean stop says what it gave up at WARNING: uvicorn's own cut was two ERROR lines, one a
    # CancelledError traceback ("Cancel 1 running task(s)", "Exception in ASGI application")
    levels = [json.loads(line)["level"] for line in lines if line.startswith("{")]
    assert "ERROR" not in levels
    assert "CRITICAL" not in levels
    assert any(
        "gave up on 1 request(s) still running after the 1.0s drain timeout (POST /done)" in line
        for line in lines
    )


def _post_quietly(url: str, body: dict[str, Any]) -> None:
    """POST ``body``; the answer does not matter (a 500 when the shutdown cuts it short)."""
    with contextlib.suppress(httpx.HTTPError):
        httpx.post(url, json=body, timeout=120.0)


def test_reset_lets_a_report_in_flight_land_before_it_hands_back_the_rest(aof_server: EmbeddedServer) -> None:
    """A worker process that died with its /done unanswered (Redis down) is restarted and resets: the
    report, still retried by the sidecar, lands; /reset used to release that lease beside it."""
    delivery = Delivery.from_url(aof_server.url)
    publish(delivery, "reset", {"w0": [item("a", 0, 10), item("b", 0, 10)]}, lease_ttl_ms=600_000)
    client = redis.Redis.from_url(aof_server.url, decode_responses=True, retry=None)
    session = WorkerSession(Delivery(client), Holdings(4), SessionSettings("w0", retry_for_s=600))

    async def script(api: httpx.AsyncClient) -> list[Any]:
        reported, _ = [(await api.get("/next")).json() for _ in range(2)]
        aof_server.kill()
        done = asyncio.create_task(api.post("/done", json={**_ref(reported), "output_tokens": 5}))
        while not any(h.completing for h in session.holdings.all()):  # the report is being retried
            await asyncio.sleep(0.01)
        reset = asyncio.create_task(api.post("/reset"))
        await asyncio.to_thread(aof_server.start)
        return [(await done).json(), (await reset).json()]

    answers = with_api(aof_server.url, script, session=session)
    assert answers == [{"outcome": "accepted"}, {"released": 1, "dead_lettered": 0}]
    assert [(r.key, r.attempt) for r in delivery.read_results("reset")] == [("a#0", 1)]
    assert delivery.progress("reset").queued == 1  # b, handed back

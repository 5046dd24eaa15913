"""A pull sidecar's start hands back what a killed predecessor under its worker id held (``takeover``),
before ``/next`` hands out anything and without spending attempts; never what a live pull sidecar with
the same id holds; Redis down at start only delays it. The worker process that outlived the killed
sidecar is refused ``stale`` for what was handed back, and every result is accepted once.

Real Redis; the pull app in process with its lifespan (heartbeats, takeover) running.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import httpx
import pytest
import redis

from service.delivery.keys import PRESENCE_TTL_MS, sidecar_presence
from service.delivery.protocol import Delivery
from service.embedded import EmbeddedServer
from service.sidecar.connecting import Connecting
from service.sidecar.launch import SidecarOptions, connect, session_for
from service.sidecar.pull_state import PullState
from service.sidecar.session import WorkerSession
from service.sidecar.takeover import TakeoverReport
from tests.service.sidecar.procs import claimed_by_a_killed_sidecar, item, publish, tally
from tests.service.sidecar.pullclient import done_body, outlived_done, pulled, serving, session_of

LEASE_TTL_MS = 60_000  # nothing in these tests may wait for a lease to lapse


def test_a_restarted_pull_sidecar_hands_back_its_killed_predecessors_leases_before_its_first_claim(
    redis_client: redis.Redis, redis_url: str
) -> None:
    delivery = Delivery.from_url(redis_url)
    items = [item(f"p{i}", 0, 10) for i in range(4)]
    publish(delivery, "crash", {"w0": items}, lease_ttl_ms=LEASE_TTL_MS)
    killed = claimed_by_a_killed_sidecar(delivery, "crash", "w0", 3)  # handed to its worker, then killed
    redis_client.set(sidecar_presence("w0"), "killed-instance", px=1000)  # its presence, lapsing
    session = session_of(redis_url, slots=8)

    async def main() -> dict[str, Any]:
        async with serving(session, lifespan=True) as (client, state):
            ready, first = await client.get("/ready"), await client.get("/next")
            # the worker outlived its sidecar and finished one item before the hand-back: it lands
            landed = await client.post("/done", json=outlived_done(killed[0]))
            started = time.monotonic()
            leases = await pulled(client, 3, timeout_s=LEASE_TTL_MS / 1000 / 6)
            back_s = time.monotonic() - started
            refused = [await client.post("/done", json=outlived_done(lease)) for lease in killed[1:]]
            accepted = [await client.post("/done", json=done_body(le, 5)) for le in leases]
            later = await client.get("/ready")
            return {
                "before": (ready.status_code, ready.json()["status"], first.status_code),
                "landed": landed.json(),
                "keys": [le["key"] for le in leases],
                "attempts": {le["attempt"] for le in leases},
                "back_s": back_s,
                "refused": [(r.status_code, r.json()["outcome"]) for r in refused],
                "accepted": [r.json()["outcome"] for r in accepted],
                "ready": later.status_code,
                "state": state,
            }

    seen = asyncio.run(main())
    assert seen["before"] == (503, "taking over", 204)  # nothing claimed ahead of the hand-back
    assert seen["landed"] == {"outcome": "accepted"}
    assert seen["back_s"] < LEASE_TTL_MS / 1000 / 6  # a presence TTL, not a lease TTL
    # the two handed back come first, in the order they were claimed, then the one never leased
    assert seen["keys"] == [killed[1].key, killed[2].key, items[3].key]
    assert seen["attempts"] == {1}  # the killed sidecar's attempts were refunded
    assert seen["refused"] == [(409, "stale")] * 2  # the survivor's late reports
    assert seen["accepted"] == ["accepted"] * 3
    assert seen["ready"] == 200
    # the survivor's late reports are refused but not counted: those leases were never this process's
    # (handed back, counted ``reset``), so they are no end of its own (before: stale 2)
    assert (session.stats.reset, session.stats.accepted, session.stats.stale) == (2, 4, 0)
    assert {r.attempt for r in delivery.read_results("crash")} == {1}
    assert tally(delivery, "crash", {i.key for i in items}) == (0, 0)
    assert seen["state"].takeover.report == TakeoverReport(released=2)


async def _ready(client: httpx.AsyncClient, timeout_s: float) -> None:
    """Return once ``/ready`` answers 200 (the takeover done); fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while (await client.get("/ready")).status_code != 200:
        assert time.monotonic() < deadline, "not ready in time"
        await asyncio.sleep(0.05)


def test_a_second_live_pull_sidecar_with_the_same_worker_id_hands_back_nothing_and_both_say_so(
    redis_client: redis.Redis, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    delivery = Delivery.from_url(redis_url)
    items = [item(f"p{i}", 0, 10) for i in range(4)]
    publish(delivery, "twins", {"w0": items}, lease_ttl_ms=LEASE_TTL_MS)
    first, second = session_of(redis_url, slots=8), session_of(redis_url, slots=8)

    async def main() -> tuple[PullState, PullState, list[str]]:
        async with serving(first, lifespan=True) as (one, first_state):
            leases = await pulled(one, 4, timeout_s=10)  # its worker runs all four
            async with serving(second, lifespan=True) as (two, second_state):
                await _ready(two, PRESENCE_TTL_MS / 1000 + 5)
                await asyncio.sleep(PRESENCE_TTL_MS / 3000 + 0.3)  # the first's next write meets it
                assert delivery.progress("twins").running == 4  # none handed back
                assert (await two.get("/next")).status_code == 204  # nothing left to claim
                done = [await one.post("/done", json=done_body(le, 5)) for le in leases]
        return first_state, second_state, [d.json()["outcome"] for d in done]

    with caplog.at_level(logging.ERROR, logger="service.sidecar"):
        first_state, second_state, outcomes = asyncio.run(main())
    assert outcomes == ["accepted"] * 4
    assert (first.stats.reset, second.stats.reset, first.stats.stale) == (0, 0, 0)
    assert tally(delivery, "twins", {i.key for i in items}) == (0, 0)
    told = sorted(r.getMessage() for r in caplog.records if "another live sidecar" in r.getMessage())
    assert len(told) == 2  # one ERROR from each
    assert told == sorted(
        f"another live sidecar (instance {s.takeover.instance}) runs as worker w0: two sidecars share its "
        "queue, and neither hands back the other's leases at start; give each its own --worker-id"
        for s in (first_state, second_state)
        if s.takeover is not None
    )
    assert first_state.takeover is not None
    assert second_state.takeover is not None
    assert second_state.takeover.report == TakeoverReport(twin=first_state.takeover.instance)


def test_a_pull_sidecar_started_while_redis_is_down_hands_back_once_it_answers() -> None:
    server = EmbeddedServer(appendonly=True).start()
    try:
        delivery = Delivery.from_url(server.url)
        items = [item(f"p{i}", 0, 10) for i in range(3)]
        publish(delivery, "outage", {"w0": items}, lease_ttl_ms=LEASE_TTL_MS)
        killed = claimed_by_a_killed_sidecar(delivery, "outage", "w0", 2)
        server.kill()  # the AOF keeps all of it (written before each reply)
        options = SidecarOptions(worker_id="w0", redis_url=server.url)
        made: list[WorkerSession] = []

        def connected() -> WorkerSession:
            made.append(session_for(options, connect(options, wait=True)))
            return made[0]

        async def main() -> tuple[list[int], list[dict[str, Any]]]:
            async with serving(Connecting("w0", connected), lifespan=True) as (client, _):
                during = [(await client.get(path)).status_code for path in ("/ready", "/next")]
                restart = threading.Timer(1.0, server.start)
                restart.start()
                leases = await pulled(client, 3, timeout_s=30)
                restart.join()
                return during, leases

        during, leases = asyncio.run(main())
        assert during == [503, 503]  # connecting: nothing claimed
        assert [le["key"] for le in leases] == [*(le.key for le in killed), items[2].key]
        assert {le["attempt"] for le in leases} == {1}
        assert made[0].stats.reset == 2
    finally:
        server.stop()

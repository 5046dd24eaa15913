"""What ``GET /leases`` tells a pull worker: the leases it holds, and those it lost and must stop."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
import redis

from service.delivery.protocol import Delivery
from service.sidecar import pull_api
from service.sidecar.holdings import Holdings
from service.sidecar.pull_api import create_pull_app
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.procs import item, publish


def test_a_worker_back_from_a_quiet_spell_is_told_at_once_which_leases_lapsed(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """Quiet past the idle timeout, its leases lapsed unheartbeated: its first call back must not list
    them as held (nor keep their slots taken) until the next heartbeat finds them gone."""
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "quiet", {"w0": [item("a", 0, 10)]}, lease_ttl_ms=200)
    session = WorkerSession(Delivery.from_url(redis_url), Holdings(1), SessionSettings("w0"))

    async def run() -> list[Any]:
        app = create_pull_app(session, idle_timeout_s=0.1)  # no lifespan here: no heartbeat loop
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://pull"
        ) as client:
            lapsed = (await client.get("/next")).json()
            while delivery.progress("quiet").running:  # its lease lapses and is reaped unheartbeated
                delivery.reap("quiet")
                await asyncio.sleep(0.05)
            leases = (await client.get("/leases")).json()
            again = (await client.get("/next")).json()  # its one slot is free for the requeued item
            lost = [one["key"] for one in leases["lost"]]
            return [lapsed["key"], leases["held"], lost, (again["key"], again["attempt"])]

    assert asyncio.run(run()) == ["a#0", [], ["a#0"], ("a#0", 2)]


def test_lost_leases_kept_for_a_worker_that_never_asks_are_bounded(
    redis_client: redis.Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each lost lease carries its item, prompt included: a worker that never calls /leases (its /done
    is answered 409 anyway) must not grow the sidecar by every lease lost or cancelled in a run."""
    monkeypatch.setattr(pull_api, "LOST_KEPT", 2)
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "many", {"w0": [item(p, 0, 10) for p in "abc"]}, lease_ttl_ms=200)
    session = WorkerSession(Delivery.from_url(redis_url), Holdings(4), SessionSettings("w0"))

    async def run() -> list[Any]:
        app = create_pull_app(session, idle_timeout_s=0.1)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://pull"
        ) as client:
            for _ in range(3):
                await client.get("/next")
            while delivery.progress("many").running:  # their leases lapse unheartbeated
                delivery.reap("many")
                await asyncio.sleep(0.05)
            lost = [[one["key"] for one in (await client.get("/leases")).json()["lost"]] for _ in range(2)]
            return [*lost, len(session.holdings)]

    assert asyncio.run(run()) == [["b#0", "c#0"], [], 0]  # the newest kept; all forgotten as held

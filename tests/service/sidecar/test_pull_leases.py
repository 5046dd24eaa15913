"""What ``GET /leases`` tells a pull worker: the leases it holds, and those it lost and must stop."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis

from service.delivery.protocol import Delivery
from service.sidecar import pull_state
from service.sidecar.holdings import Holdings
from service.sidecar.holds import hold_bound_s
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.procs import item, publish, tally
from tests.service.sidecar.pullclient import serving


def test_a_worker_back_from_a_quiet_spell_is_told_at_once_which_leases_lapsed(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """Quiet past the idle timeout, its leases lapsed unheartbeated: its first call back must not list
    them as held (nor keep their slots taken) until the next heartbeat finds them gone."""
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "quiet", {"w0": [item("a", 0, 10)]}, lease_ttl_ms=200)
    session = WorkerSession(Delivery.from_url(redis_url), Holdings(1), SessionSettings("w0"))

    async def run() -> list[Any]:
        async with serving(session, idle_timeout_s=0.1) as (client, _):  # no lifespan here: no heartbeat loop
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
    monkeypatch.setattr(pull_state, "LOST_KEPT", 2)
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "many", {"w0": [item(p, 0, 10) for p in "abc"]}, lease_ttl_ms=200)
    session = WorkerSession(Delivery.from_url(redis_url), Holdings(4), SessionSettings("w0"))

    async def run() -> list[Any]:
        async with serving(session, idle_timeout_s=0.1) as (client, _):
            for _ in range(3):
                await client.get("/next")
            while delivery.progress("many").running:  # their leases lapse unheartbeated
                delivery.reap("many")
                await asyncio.sleep(0.05)
            lost = [[one["key"] for one in (await client.get("/leases")).json()["lost"]] for _ in range(2)]
            return [*lost, len(session.holdings)]

    assert asyncio.run(run()) == [["b#0", "c#0"], [], 0]  # the newest kept; all forgotten as held


def test_an_item_the_worker_holds_past_the_hold_bound_is_reported_failed_and_requeued_at_once(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """A live worker (it keeps calling) that never reports one item must not keep it leased forever:
    past the hold bound the sidecar lists it lost and reports it failed, so it is requeued with an
    attempt spent at once, not a lease TTL later (the lease here outlives the test: no lapse, no reap);
    the abandoned lease's late report is refused, the new one's accepted, and the item counts as one
    failure, not a lost lease as well."""
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "held", {"w0": [item("a", 0, 10)]}, lease_ttl_ms=600_000)
    clock = [0.0]
    holdings = Holdings(1, clock=lambda: clock[0])
    session = WorkerSession(Delivery.from_url(redis_url), holdings, SessionSettings("w0"))

    async def run() -> list[Any]:
        async with serving(session, hold_timeout_s=100.0) as (client, state):
            first = (await client.get("/next")).json()
            clock[0] = 99.0  # within the bound: still heartbeated
            await state.beat()
            within = [one["key"] for one in (await client.get("/leases")).json()["held"]]
            clock[0] = 101.0  # past it: one heartbeat round reports it
            await state.beat()
            progress = delivery.progress("held")
            leases = (await client.get("/leases")).json()
            outcome = [within, (progress.running, progress.queued), leases["held"]]
            outcome.append([one["key"] for one in leases["lost"]])
            again = await client.get("/next")  # 204 while the item is still leased to nobody
            if again.status_code != 200:
                return [*outcome, again.status_code]
            late = await client.post("/done", json=_done(first))
            fresh = await client.post("/done", json=_done(again.json()))
            redelivered = (again.json()["key"], again.json()["attempt"])
            return [*outcome, redelivered, late.status_code, fresh.json()["outcome"]]

    assert asyncio.run(run()) == [["a#0"], (0, 1), [], ["a#0"], ("a#0", 2), 409, "accepted"]
    stats = session.stats
    # the late /done is refused 409 but counts nothing: its lease ended here once, failed (before:
    # stale 1 as well, so claimed 2 against 3 ends; docs/sidecar.md's counters balance per lease)
    assert (stats.failed, stats.lost, stats.stale, stats.accepted) == (1, 0, 0, 1)
    assert stats.claimed + stats.stolen == stats.failed + stats.accepted
    assert tally(delivery, "held", {"a#0"}) == (0, 0)


def test_the_hold_bound_grows_with_the_items_cap_at_a_quarter_of_the_measured_decode_rate() -> None:
    """The flag is a floor: an item whose max_new_tokens would take longer at a quarter of the
    worker's measured per-sequence rate keeps its lease that long (a legitimately long trajectory is
    not abandoned on every attempt until it is dead-lettered); with no rate measured, the flag alone."""
    assert hold_bound_s(16_000, None, 3600.0) == 3600.0
    assert hold_bound_s(16_000, 100.0, 3600.0) == 3600.0  # 640 s at 25 tokens/s: the floor
    assert hold_bound_s(16_000, 10.0, 3600.0) == 6400.0  # 16,000 tokens at 2.5 tokens/s


def test_leases_and_health_count_as_held_only_what_the_worker_was_handed(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """An item the sidecar claimed but could not hand out yet (its KV does not fit beside the running
    one) is the sidecar's, not the worker's: listing it told the worker of a lease it never got, and
    counting it in /health's ``held`` over-reported what the worker holds; it is counted ``waiting``."""
    delivery = Delivery.from_url(redis_url)
    items = [item("a", 0, 600), item("b", 0, 600)]  # 700 KV tokens each at predicted length
    publish(delivery, "kv", {"w0": items}, kv_admission=True)
    session = WorkerSession(Delivery.from_url(redis_url), Holdings(4, 1000), SessionSettings("w0"))

    async def run() -> list[Any]:
        async with serving(session) as (client, _):
            handed = (await client.get("/next")).json()["key"]
            nothing = (await client.get("/next")).status_code  # b claimed, but waits for KV
            held = [one["key"] for one in (await client.get("/leases")).json()["held"]]
            health = (await client.get("/health")).json()
            return [handed, nothing, len(session.holdings), held, (health["held"], health["waiting"])]

    assert asyncio.run(run()) == ["a#0", 204, 2, ["a#0"], (1, 1)]  # /health counts as /leases lists


def _done(lease: dict[str, Any]) -> dict[str, Any]:
    return {key: lease[key] for key in ("schedule_id", "key", "token")} | {"output_tokens": 10}

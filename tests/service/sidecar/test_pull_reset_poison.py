"""A pull worker process killed by an item it runs (an in-process engine OOMs on that input) is
restarted and calls ``POST /reset``: what it held goes back, refunded the first time only. Refunded at
every restart, the item was handed to the new process first, killed it again, and never ran out of
attempts; now it is dead-lettered after ``max_attempts``, saying why. Real Redis, the pull app in
process."""

from __future__ import annotations

import asyncio
from typing import Any

import redis

from service.delivery.keys import RESET_REFUNDS
from service.delivery.protocol import Delivery
from service.delivery.records import LeaseSettings, PublishedSchedule
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.procs import item, tally
from tests.service.sidecar.pullclient import serving

ATTEMPTS = 2


def _pull(redis_url: str, rounds: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    """A worker that dies at every run of the poison: /next, then (restarted) /reset, ``rounds`` times
    or until /next has nothing; then it runs what is left. (resets, leases of the poison, /next status)"""
    session = WorkerSession(Delivery.from_url(redis_url), Holdings(1), SessionSettings("w0"))

    async def run() -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
        async with serving(session) as (client, _):
            resets, leases = [], []
            for _ in range(rounds):
                answer = await client.get("/next")
                if answer.status_code != 200 or answer.json()["key"] != "poison#0":
                    break
                leases.append(answer.json())
                resets.append((await client.post("/reset")).json())  # it died; its successor resets
            else:
                answer = await client.get("/next")
            while answer.status_code == 200:  # the others run
                lease = answer.json()
                body = {k: lease[k] for k in ("schedule_id", "key", "token")}
                assert (await client.post("/done", json={**body, "output_tokens": 3})).status_code == 200
                answer = await client.get("/next")
            return resets, leases, answer.status_code

    return asyncio.run(run())


def test_an_item_that_kills_its_pull_worker_at_every_run_is_dead_lettered_not_refunded_for_ever(
    redis_client: redis.Redis, redis_url: str
) -> None:
    delivery = Delivery.from_url(redis_url)
    others = [item("fine", i, 1) for i in range(2)]
    lease = LeaseSettings(lease_ttl_ms=30_000, max_attempts=ATTEMPTS)
    delivery.publish(PublishedSchedule("pull-poison", {"w0": (item("poison", 0, 10), *others)}, lease=lease))
    deaths = ATTEMPTS + RESET_REFUNDS
    resets, leases, last = _pull(redis_url, rounds=4 * deaths)
    assert [le["attempt"] for le in leases] == [1] * (RESET_REFUNDS + 1) + list(range(2, ATTEMPTS + 1))
    assert resets == [{"released": 1, "dead_lettered": 0}] * (deaths - 1) + [
        {"released": 0, "dead_lettered": 1}
    ]
    (dead,) = delivery.progress("pull-poison").dead_letters
    assert (dead.key, dead.attempts) == ("poison#0", ATTEMPTS)
    assert dead.reason == (
        f"its worker process died holding it {deaths} times (handed back at each restart), "
        f"after {ATTEMPTS} attempts"
    )
    assert last == 204
    assert delivery.progress("pull-poison").finished
    assert tally(delivery, "pull-poison", {i.key for i in others}) == (0, 0)


def test_a_lease_claimed_ahead_and_never_handed_to_the_worker_is_refunded_at_every_reset(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """Only what the dead process was handed may have killed it: a lease the sidecar claimed for it
    but held back (its KV cache full) keeps its refund however often the worker dies."""
    delivery = Delivery.from_url(redis_url)
    lease = LeaseSettings(lease_ttl_ms=30_000, max_attempts=1)
    items = (item("poison", 0, 10), item("held-back", 0, 10))
    delivery.publish(PublishedSchedule("ahead", {"w0": items}, kv_admission=True, lease=lease))
    session = WorkerSession(Delivery.from_url(redis_url), Holdings(2), SessionSettings("w0"))

    async def run() -> list[Any]:
        async with serving(session) as (client, _):
            handed = [(await client.get("/next")).json()["key"] for _ in items]  # both run; it dies
            first = (await client.post("/reset")).json()
            # its successor's engine has a smaller cache: the second item waits behind the first
            session.holdings.kv_capacity_tokens = sum(i.prompt_tokens + 10 for i in items) - 1
            again = (await client.get("/next")).json()["key"]
            waiting = (await client.get("/next")).status_code  # claimed, held back: never handed
            second = (await client.post("/reset")).json()
            return [handed, first, again, waiting, second]

    assert asyncio.run(run()) == [
        ["poison#0", "held-back#0"],
        {"released": 2, "dead_lettered": 0},
        "poison#0",
        204,
        {"released": 1, "dead_lettered": 1},  # the poison's second death; the held-back one refunded
    ]
    (dead,) = delivery.progress("ahead").dead_letters
    assert dead.key == "poison#0"
    assert delivery.progress("ahead").workers["w0"].queued == 1
    (back,) = delivery.claim("ahead", "w0", 1)
    assert (back.key, back.attempt) == ("held-back#0", 1)

"""A pull worker's report of a lease the sidecar no longer holds adds nothing to its counters.

The sidecar counts each lease it took once, as it ends there, so ``claimed + stolen + inherited``
balances what ended (docs/sidecar.md, counters). A lease listed lost was counted ``lost``, one held
past its hold bound ``failed``; the worker's late ``/done`` or ``/fail`` of it is still refused
(409 ``stale``, 200 ``{"outcome": "stale"}``) but was counted ``stale`` as well, and the retry of a
``/done`` Redis took unanswered, found gone by a heartbeat (``lost``), ``duplicate`` as well: one
lease ended twice, and the chaos soaks' balance check had to allow for the worker's reports. Such a
``/done`` now ends its lease as what it was: the heartbeat sends the kept result again, and Redis's
answer to that very token says whether it landed (``duplicate``) or not (``stale``).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
import pytest
import redis

from service.delivery.protocol import Delivery
from service.sidecar.holdings import Holdings
from service.sidecar.pull_state import PullState
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.lease_ends import ends_of
from tests.service.sidecar.procs import item, publish, tally
from tests.service.sidecar.pullclient import report_body, serve
from tests.service.sidecar.unanswered import UnansweredCompletions

STALE_ANSWER = {"done": (409, "stale"), "fail": (200, "stale")}  # docs/sidecar.md's pull API table


@pytest.mark.parametrize("kind", ["done", "fail"])
def test_a_report_of_a_lease_listed_lost_is_refused_stale_and_the_lease_counts_once_lost(
    redis_client: redis.Redis, redis_url: str, kind: str
) -> None:
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "lapse", {"w0": [item("a", 0, 10)]}, lease_ttl_ms=200)
    session = WorkerSession(Delivery.from_url(redis_url), Holdings(1), SessionSettings("w0"))

    async def script(client: httpx.AsyncClient, state: PullState) -> list[Any]:
        lease = (await client.get("/next")).json()
        while delivery.progress("lapse").running:  # its lease lapses unheartbeated and is reaped
            delivery.reap("lapse")
            await asyncio.sleep(0.05)
        await state.beat()  # finds it gone: counted lost, listed lost
        lost = [one["key"] for one in (await client.get("/leases")).json()["lost"]]
        late = await client.post(f"/{kind}", json=report_body(kind, lease))
        return [lost, (late.status_code, late.json()["outcome"])]

    assert serve(session, script) == [["a#0"], STALE_ANSWER[kind]]
    assert session.stats.claimed == 1
    assert ends_of(session.stats) == {"lost": 1}  # before: {"lost": 1, "stale": 1}


def test_a_fail_of_a_lease_held_past_its_bound_is_a_duplicate_and_the_lease_counts_once_failed(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """The ``/fail`` twin of ``test_pull_leases.py``'s hold-bound test (there a late ``/done``). The
    worker's ``/fail`` repeats the failure the beat took for this token: ``duplicate`` (``P:failed``;
    before 2026-12-05, ``stale``), and counted nothing more."""
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "held", {"w0": [item("a", 0, 10)]}, lease_ttl_ms=600_000)
    clock = [0.0]
    holdings = Holdings(1, clock=lambda: clock[0])
    session = WorkerSession(Delivery.from_url(redis_url), holdings, SessionSettings("w0"))

    async def script(client: httpx.AsyncClient, state: PullState) -> list[Any]:
        lease = (await client.get("/next")).json()
        clock[0] = 101.0  # past the bound: the beat reports it failed (requeued, an attempt spent)
        await state.beat()
        late = await client.post("/fail", json=report_body("fail", lease))
        return [(late.status_code, late.json()["outcome"]), delivery.progress("held").queued]

    assert serve(session, script, hold_timeout_s=100.0) == [(200, "duplicate"), 1]
    assert ends_of(session.stats) == {"failed": 1}  # before: {"failed": 1, "stale": 1}


def test_a_done_that_landed_unanswered_then_found_gone_counts_once_duplicate_and_is_not_listed_lost(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """Redis took the ``/done`` but its answer never came within the retry window: the worker is
    answered 503 and the lease kept held for its retry. A heartbeat then finds the lease gone (the
    item is done) and sends the kept result once more: answered ``duplicate``, this very token's
    completion landed, so the lease ends ``duplicate`` as a retry within the window would have
    counted it, not ``lost``, and is not listed lost. The worker's retry is answered ``duplicate``
    too, and counts nothing more. Before: ``{"lost": 1}``, listed lost."""
    publish(Delivery.from_url(redis_url), "unanswered", {"w0": [item("a", 0, 10)]})
    delivery = UnansweredCompletions(redis.Redis.from_url(redis_url), lands=True)
    settings = SessionSettings("w0", retry_for_s=0.0)  # the window over at the first lost answer
    session = WorkerSession(delivery, Holdings(1), settings)

    async def script(client: httpx.AsyncClient, state: PullState) -> list[Any]:
        lease = (await client.get("/next")).json()
        delivery.out.set()
        first = (await client.post("/done", json=report_body("done", lease))).status_code
        held = len(session.holdings)
        delivery.out.clear()  # Redis answers again
        await state.beat()
        retried = await client.post("/done", json=report_body("done", lease))
        return [first, held, len(state.lost), (retried.status_code, retried.json()["outcome"])]

    assert serve(session, script) == [503, 1, 0, (200, "duplicate")]
    assert ends_of(session.stats) == {"duplicate": 1}
    assert len(session.holdings) == 0
    assert tally(Delivery.from_url(redis_url), "unanswered", {"a#0"}) == (0, 0)


def test_a_done_that_never_landed_and_whose_lease_lapsed_counts_once_stale_and_is_listed_lost(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """The twin: the unanswered ``/done`` never reached Redis, and its lease lapsed and was reaped
    before the heartbeat. The kept result sent again is refused: the lease ends ``stale``, as a
    completion refused for its lease does, and is listed lost; the worker's retry is answered 409
    ``stale`` and counts nothing more. Before: ``{"lost": 1}``."""
    publish(Delivery.from_url(redis_url), "lapsed", {"w0": [item("a", 0, 10)]}, lease_ttl_ms=200)
    delivery = UnansweredCompletions(redis.Redis.from_url(redis_url), lands=False)
    session = WorkerSession(delivery, Holdings(1), SessionSettings("w0", retry_for_s=0.0))

    async def script(client: httpx.AsyncClient, state: PullState) -> list[Any]:
        lease = (await client.get("/next")).json()
        delivery.out.set()
        first = (await client.post("/done", json=report_body("done", lease))).status_code
        delivery.out.clear()
        while delivery.progress("lapsed").running:  # its lease lapses unheartbeated and is reaped
            delivery.reap("lapsed")
            await asyncio.sleep(0.05)
        await state.beat()
        lost = [one["key"] for one in state.lost]
        retried = await client.post("/done", json=report_body("done", lease))
        return [first, lost, (retried.status_code, retried.json()["outcome"])]

    assert serve(session, script) == [503, ["a#0"], STALE_ANSWER["done"]]
    assert ends_of(session.stats) == {"stale": 1}
    assert len(session.holdings) == 0


class _CancelCheckHeld(UnansweredCompletions):
    """``UnansweredCompletions`` whose check for a cancel (the heartbeat's round trip for the leases it found
    gone) waits for ``go`` once ``asked`` is set: the worker's retry comes in meanwhile."""

    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client, lands=True)
        self.asked = threading.Event()
        self.go = threading.Event()

    def cancelled(self, schedule_id: str) -> bool:
        self.asked.set()
        self.go.wait(timeout=60)
        return super().cancelled(schedule_id)


def test_a_retry_that_lands_while_the_heartbeat_counts_other_leases_gone_leaves_the_resend_unsent(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """The heartbeat finds two leases gone: one lapsed (``lost``), one whose ``/done`` landed
    unanswered. While it asks Redis about a cancel for the first, the worker's retry of the second
    is answered ``duplicate`` and ends it; the heartbeat's resend, in its turn after that, finds the
    lease no longer held and sends nothing, so the second counts once (not ``duplicate`` twice)."""
    publish(
        Delivery.from_url(redis_url), "two", {"w0": [item("a", 0, 10), item("b", 0, 10)]}, lease_ttl_ms=300
    )
    delivery = _CancelCheckHeld(redis.Redis.from_url(redis_url))
    session = WorkerSession(delivery, Holdings(2), SessionSettings("w0", retry_for_s=0.0))

    async def script(client: httpx.AsyncClient, state: PullState) -> list[Any]:
        lapses, done = [(await client.get("/next")).json() for _ in range(2)]
        delivery.out.set()
        first = (await client.post("/done", json=report_body("done", done))).status_code
        delivery.out.clear()
        while delivery.progress("two").running:  # the other lease lapses unheartbeated and is reaped
            delivery.reap("two")
            await asyncio.sleep(0.05)
        beat = asyncio.create_task(state.beat())
        await asyncio.to_thread(delivery.asked.wait, 60)  # the heartbeat is counting the lapsed one
        retried = await client.post("/done", json=report_body("done", done))
        delivery.go.set()
        await beat
        lost = [one["key"] for one in state.lost]
        return [first, (retried.status_code, retried.json()["outcome"]), lost == [lapses["key"]]]

    assert serve(session, script) == [503, (200, "duplicate"), True]
    assert ends_of(session.stats) == {"lost": 1, "duplicate": 1}
    assert session.stats.claimed == 2

"""The hold bound's failure report that Redis never answers leaves the lease to end once, with the
first answer about it.

``PullState.fail_abandoned`` counted such a lease ``lost`` at once (landed or not, nothing tells).
The failure had not landed, the lease was still current in Redis, and the worker's late ``/done`` of
it was accepted: a report of a lease this sidecar no longer held, counted ``accepted`` and
``inherited`` beside the ``lost``: one lease ended twice, ``inherited`` naming no predecessor. Now
the lease is held again, not heartbeated, and the next beat sends the failure once more; the first
answer ends it: the worker's ``/done`` accepted (``accepted``), the failure taken (``failed``, the
item requeued at once instead of a lease TTL later; or, landed before, its repeat answered DUPLICATE,
since 2026-12-05: ``failed`` too, where it was refused ``stale``), or a ``/done`` refused (``stale``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
import redis

from service.delivery.protocol import Delivery
from service.sidecar.pull_state import PullState
from service.sidecar.session import WorkerSession
from tests.service.sidecar.procs import item, publish
from tests.service.sidecar.pullclient import report_body, serve, serving
from tests.service.sidecar.unanswered import one_slot_session

COUNTERS = ("inherited", "accepted", "duplicate", "stale", "failed", "released", "lost", "cancelled")
BOUND_S = 100.0


def _counted(session: WorkerSession) -> dict[str, int]:
    return {name: getattr(session.stats, name) for name in COUNTERS if getattr(session.stats, name)}


def _abandoned_unanswered(
    redis_url: str, lands: bool, then: str, rate_drops: bool = False
) -> tuple[list[Any], WorkerSession]:
    """One item handed out and held past its bound; the beat's failure report of it goes unanswered
    (landed in Redis or not), Redis answers again, and ``then`` comes: the worker's late ``/done``,
    or the next beat (``rate_drops``: after a slow completion measured meanwhile raised every
    item's bound far past this one's time). What the worker saw, and the session."""
    publish(Delivery.from_url(redis_url), "s", {"w0": [item("a", 0, 10)]}, lease_ttl_ms=600_000)
    delivery, clock, session = one_slot_session(redis_url, lands)

    async def script(client: httpx.AsyncClient, state: PullState) -> list[Any]:
        lease = (await client.get("/next")).json()
        clock[0] = BOUND_S + 1
        delivery.out.set()
        await state.beat()
        delivery.out.clear()
        listed = [one["key"] for one in (await client.get("/leases")).json()["lost"]]
        if then == "done":
            late = await client.post("/done", json=report_body("done", lease))
            told_failed = "the item was failed" in late.json().get("error", "")
            answer = [late.status_code, late.json()["outcome"], told_failed]
        else:
            if rate_drops:
                session.holdings.observe(10, 1000.0)  # 0.01 token/s: a bound of months
            await state.beat()
            answer = []
        held = (await client.get("/leases")).json()
        return [listed, answer, held["held"], [one["key"] for one in held["lost"]], len(session.holdings)]

    return serve(session, script, hold_timeout_s=BOUND_S), session


# (the failure landed, what came next): the worker's answer, and the lease's one end
CASES = {
    (False, "done"): ([200, "accepted", False], {"accepted": 1}),  # before: lost, accepted and inherited
    # the /done refused, the failure is sent again: DUPLICATE (P:failed), and the worker is told so;
    # before: stale (round 45), and lost before that
    (True, "done"): ([409, "stale", True], {"failed": 1}),
    (False, "beat"): ([], {"failed": 1}),  # before: lost, the item leased until its lease lapsed
    (True, "beat"): ([], {"failed": 1}),  # its repeat is DUPLICATE (P:failed); before: stale, and lost
}


@pytest.mark.parametrize(("lands", "then"), list(CASES))
def test_an_abandoned_items_unanswered_failure_report_ends_its_lease_once_with_the_first_answer(
    redis_client: redis.Redis, redis_url: str, lands: bool, then: str
) -> None:
    seen, session = _abandoned_unanswered(redis_url, lands, then)
    answer, ended = CASES[(lands, then)]
    # listed lost once, never listed held again, and no longer held once answered
    assert seen == [["a#0"], answer, [], [], 0]
    assert _counted(session) == ended
    progress = Delivery.from_url(redis_url).progress("s")
    accepted = then == "done" and not lands  # else the failure landed, first or sent again: requeued
    assert (progress.done, progress.queued, progress.running) == (int(accepted), int(not accepted), 0)


def test_an_unanswered_failure_report_is_sent_again_even_once_a_measured_rate_raised_the_bound(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """Its item is no longer past its bound: it was reported failed, so the report is sent again all
    the same (else the lease stayed held and heartbeated, counted nowhere, until the bound came)."""
    seen, session = _abandoned_unanswered(redis_url, lands=False, then="beat", rate_drops=True)
    assert seen == [["a#0"], [], [], [], 0]
    assert _counted(session) == {"failed": 1}


def test_a_lease_whose_failure_report_is_sent_again_is_counted_held_nowhere_the_worker_reads(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """The lease listed lost to the worker while its failure report waits for Redis is not what the
    worker holds: ``/health``'s ``held`` and the ``held`` gauge count what ``/leases`` lists as held
    (docs/sidecar.md), and it is not ``waiting`` either (it was handed out). They counted it held."""
    publish(Delivery.from_url(redis_url), "s", {"w0": [item("a", 0, 10)]}, lease_ttl_ms=600_000)
    delivery, clock, session = one_slot_session(redis_url, lands=False)

    async def run() -> list[Any]:
        async with serving(session, hold_timeout_s=BOUND_S) as (client, state):
            await client.get("/next")
            clock[0] = BOUND_S + 1
            delivery.out.set()
            await state.beat()
            health = (await client.get("/health")).json()
            gauges = [
                line.split()[-1]
                for line in (await client.get("/metrics")).text.splitlines()
                if line.startswith(("rollout_sidecar_held{", "rollout_sidecar_waiting{"))
            ]
            listed = (await client.get("/leases")).json()["held"]
            return [len(listed), health["held"], health["waiting"], gauges, len(session.holdings)]

    assert asyncio.run(run()) == [0, 0, 0, ["0.0", "0.0"], 1]  # still held here, for the resend

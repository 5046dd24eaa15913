"""What a restarted pull sidecar answers the worker that outlived its killed predecessor, while it
connects and while it takes over: a report it cannot take yet is a 503 with ``Retry-After`` (the
worker retries it: dropped, its lease was handed back and the finished item ran again), and a report
of a predecessor's lease still current is accepted once and counted ``inherited`` besides ``accepted``,
so the new process's counters balance (``claimed + stolen + inherited`` against what ended); a
``/fail`` of one is taken as well, charged an attempt and counted ``failed`` and ``inherited``.

Real Redis; the pull app in process with its lifespan (connect, takeover, heartbeats) running.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
import redis

from service.delivery.keys import sidecar_presence
from service.delivery.protocol import Delivery
from service.delivery.records import Lease
from service.sidecar.connecting import Connecting
from service.sidecar.session import WorkerSession
from tests.service.sidecar.procs import claimed_by_a_killed_sidecar, item, publish, tally
from tests.service.sidecar.pullclient import done_body, outlived_done, pulled, serving, session_of

LEASE_TTL_MS = 60_000  # nothing in these tests may wait for a lease to lapse


async def _report_as_a_worker_does(client: httpx.AsyncClient, body: dict[str, Any]) -> httpx.Response:
    """``POST /done`` as docs/sidecar.md's worker loop sends it: a 503 is retried after its
    ``Retry-After``, any other answer is final."""
    for _ in range(50):
        answer = await client.post("/done", json=body)
        if answer.status_code != 503:
            return answer
        await asyncio.sleep(float(answer.headers["Retry-After"]) / 10)  # the test's own clock, shorter
    raise AssertionError("still 503 after 50 tries")


def test_a_report_sent_while_the_restarted_sidecar_connects_is_a_503_to_retry_and_lands_once_as_inherited(
    redis_client: redis.Redis, redis_url: str
) -> None:
    delivery = Delivery.from_url(redis_url)
    items = [item(f"p{i}", 0, 10) for i in range(3)]
    publish(delivery, "restart", {"w0": items}, lease_ttl_ms=LEASE_TTL_MS)
    killed = claimed_by_a_killed_sidecar(delivery, "restart", "w0", 2)  # its worker runs both, lives on
    redis_client.set(sidecar_presence("w0"), "killed-instance", px=4000)  # the takeover waits it out
    reached = threading.Event()
    made: list[WorkerSession] = []

    def connect() -> WorkerSession:  # Redis reached only when the test says (the new process's start)
        reached.wait(10)
        made.append(session_of(redis_url, slots=8))
        return made[0]

    async def main() -> dict[str, Any]:
        async with serving(Connecting("w0", connect), lifespan=True) as (client, state):
            connecting = await client.post("/done", json=outlived_done(killed[0]))
            reached.set()
            landed = await _report_as_a_worker_does(client, outlived_done(killed[0]))
            taking_over = state.taking_over  # the predecessor's presence key still lives
            again = await client.post("/done", json=outlived_done(killed[0]))  # its reply lost: sent again
            leases = await pulled(client, 2, timeout_s=LEASE_TTL_MS / 1000 / 6)
            late = await client.post("/done", json=outlived_done(killed[1]))  # after the hand-back: refused
            for lease in leases:
                await client.post("/done", json=done_body(lease, 5))
            return {
                "connecting": (connecting.status_code, connecting.headers.get("Retry-After")),
                "landed": (landed.json(), taking_over),
                "again": again.json(),
                "keys": [lease["key"] for lease in leases],
                "late": late.status_code,
            }

    seen = asyncio.run(main())
    assert seen["connecting"] == (503, "1")  # retry in a second, not drop
    assert seen["landed"] == ({"outcome": "accepted"}, True)  # taken during the takeover, not run again
    assert seen["again"] == {"outcome": "duplicate"}
    assert seen["keys"] == [killed[1].key, items[2].key]  # only the unreported lease went back
    assert seen["late"] == 409
    stats = made[0].stats
    # the repeat (``duplicate``) and the late report (409) are answered but not counted: the lease
    # they name ended here already (accepted) or was handed back (``reset``); before: duplicate 1, stale 1
    assert (stats.claimed, stats.inherited, stats.accepted, stats.duplicate) == (2, 1, 3, 0)
    assert (stats.reset, stats.stale) == (1, 0)
    # every lease this process took, or was reported as current, ended once: accepted here
    assert stats.claimed + stats.stolen + stats.inherited == stats.accepted
    assert tally(delivery, "restart", {i.key for i in items}) == (0, 0)  # lost 0, accepted twice 0


def test_a_report_refused_while_connecting_is_awaited_before_the_hand_back_when_no_predecessor_is_present(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """The predecessor's presence key had lapsed (its restart took longer than the presence TTL): the
    takeover does not wait on it, yet the worker's report refused 503 while connecting comes back a
    ``Retry-After`` later. The hand-back waits for that retry, which lands ``accepted``; before, the
    takeover handed the lease back at once and the retry was refused stale, the item run again."""
    delivery = Delivery.from_url(redis_url)
    items = [item(f"p{i}", 0, 10) for i in range(3)]
    publish(delivery, "lapsed", {"w0": items}, lease_ttl_ms=LEASE_TTL_MS)
    killed = claimed_by_a_killed_sidecar(delivery, "lapsed", "w0", 2)
    assert redis_client.get(sidecar_presence("w0")) is None  # nothing for the takeover to wait on
    reached = threading.Event()
    made: list[WorkerSession] = []

    def connect() -> WorkerSession:
        reached.wait(10)
        made.append(session_of(redis_url, slots=8))
        return made[0]

    async def main() -> dict[str, Any]:
        async with serving(Connecting("w0", connect), lifespan=True) as (client, state):
            state.report_retry_grace_s = 60.0  # the retry below, not the clock, ends the wait
            refused = await client.post("/done", json=outlived_done(killed[0]))
            reached.set()
            while not state.connected:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.3)  # the worker waits its Retry-After; a takeover would be done
            held_back = not state.claims_open
            retried = await client.post("/done", json=outlived_done(killed[0]))
            leases = await pulled(client, 2, timeout_s=LEASE_TTL_MS / 1000 / 6)
            for lease in leases:
                await client.post("/done", json=done_body(lease, 5))
            return {
                "refused": (refused.status_code, refused.headers.get("Retry-After")),
                "held_back": held_back,
                "retried": retried.json(),
                "keys": [lease["key"] for lease in leases],
            }

    seen = asyncio.run(main())
    assert seen["refused"] == (503, "1")
    assert seen["retried"] == {"outcome": "accepted"}  # landed: its item is not run again
    assert seen["held_back"]  # no hand-back while the refused report's retry was due
    assert seen["keys"] == [killed[1].key, items[2].key]  # only the unreported lease went back
    stats = made[0].stats
    assert (stats.claimed, stats.inherited, stats.accepted, stats.reset) == (2, 1, 3, 1)
    assert stats.claimed + stats.stolen + stats.inherited == stats.accepted
    assert tally(delivery, "lapsed", {i.key for i in items}) == (0, 0)


def test_a_fail_of_the_predecessors_current_lease_during_the_takeover_is_charged_and_counted_inherited(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """The worker that outlived the killed sidecar could not run one of its items and says so while
    the new process takes over: the token in Redis decides, as for a ``/done``. Still current, the
    failure lands (requeued, its attempt spent) and is counted ``failed`` and ``inherited``; the same
    report again is ``duplicate`` (``P:failed``), one of a lease the hand-back took ``stale``. Before,
    the sidecar answered ``stale`` without asking Redis and counted nothing: the hand-back then
    refunded the attempt, and the item ran again as if it had never failed."""
    delivery = Delivery.from_url(redis_url)
    items = [item(f"p{i}", 0, 10) for i in range(3)]
    publish(delivery, "failing", {"w0": items}, lease_ttl_ms=LEASE_TTL_MS)
    killed = claimed_by_a_killed_sidecar(delivery, "failing", "w0", 2)  # its worker runs both, lives on
    redis_client.set(sidecar_presence("w0"), "killed-instance", px=4000)  # the takeover waits it out
    session = session_of(redis_url, slots=8)

    def failure(lease: Lease) -> dict[str, Any]:
        return {"schedule_id": lease.schedule_id, "key": lease.key, "token": lease.token, "reason": "oom"}

    async def main() -> dict[str, Any]:
        async with serving(session, lifespan=True) as (client, state):
            for _ in range(1000):  # a bound, not a wait: the takeover begins as the lifespan starts
                if state.taking_over:
                    break
                await asyncio.sleep(0.01)
            failed = (await client.post("/fail", json=failure(killed[0]))).json()
            during = state.taking_over  # the predecessor's presence key still lives
            again = (await client.post("/fail", json=failure(killed[0]))).json()  # its reply lost
            leases = await pulled(client, 3, timeout_s=LEASE_TTL_MS / 1000 / 6)
            late = (await client.post("/fail", json=failure(killed[1]))).json()  # after the hand-back
            for lease in leases:
                await client.post("/done", json=done_body(lease, 5))
            return {
                "failed": (failed, during),
                "again": again["outcome"],
                "attempts": {lease["key"]: lease["attempt"] for lease in leases},
                "late": late["outcome"],
            }

    seen = asyncio.run(main())
    assert seen["failed"] == ({"outcome": "requeued"}, True)  # taken during the takeover
    assert seen["again"] == "duplicate"  # this token's failure was taken: the item is not failed twice
    # the failed item's next run is its second attempt; the unreported lease went back refunded
    assert seen["attempts"] == {killed[0].key: 2, killed[1].key: 1, items[2].key: 1}
    assert seen["late"] == "stale"
    stats = session.stats
    assert (stats.claimed, stats.inherited, stats.failed, stats.accepted) == (3, 1, 1, 3)
    # the repeated /fail (duplicate) and the late one (stale) are answered but not counted: the one
    # lease ended here (failed), the other was handed back (``reset``); before: stale 2
    assert (stats.reset, stats.stale) == (1, 0)
    # every lease this process took, or was reported as current, ended once: accepted or failed here
    assert stats.claimed + stats.stolen + stats.inherited == stats.accepted + stats.failed
    assert tally(delivery, "failing", {i.key for i in items}) == (0, 0)

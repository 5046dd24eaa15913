"""A pull lease whose hold-bound failure report Redis never answered (``failing``) gives its slot back.

Such a lease is held again only to end it once: the next beat sends its failure report once more
(``PullState.abandon``), and the worker was told it lost it (``GET /leases`` listed it lost, never
held again). It kept its slot, its KV reservation and its place in the in-flight count all the same,
until an answer came: with Redis back, ``/next`` answered 204 to a worker with nothing to run until the
next beat (up to a third of the lease TTL), ``/health`` counted it ``held``, and the concurrency the
sidecar measured for the worker's other items (what the service learns its speed from) counted one
sequence the worker no longer ran. A failure report Redis answers frees the slot at once; one it did
not answer now frees it too, so what the worker is given does not hang on whether Redis answered.
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis

from service.delivery.protocol import Delivery
from tests.service.sidecar.procs import item, publish
from tests.service.sidecar.pullclient import report_body, serving
from tests.service.sidecar.unanswered import one_slot_session

BOUND_S = 100.0
RAN_S = 10.0  # the second item's run, on the holdings' clock


def test_a_failing_lease_frees_its_slot_and_is_not_counted_in_flight(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """One slot: ``a`` held past its bound, its failure report unanswered; Redis answers again, and
    the worker asks for more before the next beat. ``/health`` says none held nor waiting (before: 1
    held), it gets ``b`` (before: 204), and ``b``'s measured concurrency is 1 (``a`` counted beside
    it: 2); the next beat then ends ``a`` (``failed``), and the counters balance."""
    publish(Delivery.from_url(redis_url), "s", {"w0": [item("a", 0, 10), item("b", 0, 10)]}, 600_000)
    delivery, clock, session = one_slot_session(redis_url, lands=False)

    async def run() -> list[Any]:
        async with serving(session, hold_timeout_s=BOUND_S) as (client, state):
            first = (await client.get("/next")).json()
            clock[0] = BOUND_S + 1
            delivery.out.set()
            await state.beat()  # its failure report unanswered: held again, failing
            delivery.out.clear()
            health = (await client.get("/health")).json()
            held = [health["held"], health["waiting"]]
            second = await client.get("/next")
            if second.status_code != 200:
                return [first["key"], second.status_code, held]
            clock[0] += RAN_S
            done = await client.post("/done", json=report_body("done", second.json()))
            await state.beat()  # sends a's failure report again: answered now
            return [first["key"], second.json()["key"], held, done.json()["outcome"]]

    assert asyncio.run(run()) == ["a#0", "b#0", [0, 0], "accepted"]
    (stored,) = Delivery.from_url(redis_url).read_results("s")
    assert (stored.key, stored.result.extra["concurrency"], stored.result.wall_time_s) == ("b#0", 1.0, RAN_S)
    stats = session.stats
    assert (stats.claimed, stats.accepted, stats.failed, len(session.holdings)) == (2, 1, 1, 0)
    ended = stats.accepted + stats.duplicate + stats.stale + stats.failed + stats.released + stats.lost
    assert ended + stats.cancelled == stats.claimed + stats.stolen + stats.inherited

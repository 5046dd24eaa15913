"""``POST /reset``'s resends of the kept ``/done`` results keep to a bound on a stalled Redis.

A ``/done`` Redis never answered keeps its result, and ``/reset`` sends it once more before the hand-back
(``test_pull_kept_resends.py``). Each resend was one try with no overall bound: on a stalled Redis
(SIGSTOPped here: connections accepted, nothing answered) the reset waited one socket timeout per
kept result, then a release that waited one more. The resends now keep to the shutdown's bound
(``release_within_s``), and a result still unanswered then makes the reset a 503 with ``Retry-After``
that hands nothing back: the worker's retry, Redis answering, sends it again, and each lease ends once.

The client's socket timeout is set long (``SOCKET_TIMEOUT_S``) and the bound short (``WITHIN_S``): a
resend that waits takes the whole timeout, at any load, so the count of resends begun says whether
the bound cut the first; no wall-clock figure is asserted.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import redis

from service.delivery.hangable import hangable
from service.delivery.outcomes import CompletionOutcome
from service.delivery.protocol import Delivery
from service.delivery.stored import REPLY_DECODING
from service.embedded import EmbeddedServer
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.procs import item, publish
from tests.service.sidecar.pullclient import report_body, serving, until
from tests.service.sidecar.unanswered import UnansweredCompletions

SOCKET_TIMEOUT_S = 10.0  # what a call on the stalled server waits for
WITHIN_S = 1.0  # the release grace: the shutdown's bound on its resends, and now the reset's


class CountedCompletions(UnansweredCompletions):
    """``UnansweredCompletions`` that counts the completion calls begun and those that returned."""

    def __init__(self, client: redis.Redis, lands: bool) -> None:
        super().__init__(client, lands)
        self.begun = 0
        self.returned = 0

    def complete_many(self, *args: Any, **kwargs: Any) -> list[CompletionOutcome]:
        self.begun += 1
        try:
            return super().complete_many(*args, **kwargs)
        finally:
            self.returned += 1


def test_a_reset_on_a_stalled_redis_resends_within_the_bound_then_503s_and_its_retry_ends_each_lease_once(
    server: EmbeddedServer,
) -> None:
    """Two ``/done``s unanswered (not landed), Redis stalled, ``/reset``: 503 with ``Retry-After``
    once the bound cut the first resend, the second never begun (before: both sent, each waiting out
    the socket timeout, then the release a third). Redis back, the retried reset sends them again:
    each lease ends once, accepted (or ``duplicate``, where the cut resend reached Redis first)."""
    publish(Delivery.from_url(server.url), "s", {"w0": [item("a", 0, 10), item("b", 0, 10)]}, 600_000)
    client = hangable(server.url, socket_timeout=SOCKET_TIMEOUT_S, **REPLY_DECODING)
    delivery = CountedCompletions(client, lands=False)
    session = WorkerSession(delivery, Holdings(2), SessionSettings("w0", retry_for_s=0.0))

    async def run() -> list[Any]:
        async with serving(session, release_within_s=WITHIN_S) as (worker, _):
            leases = [(await worker.get("/next")).json() for _ in range(2)]
            delivery.out.set()
            for lease in leases:
                assert (await worker.post("/done", json=report_body("done", lease))).status_code == 503
            delivery.out.clear()
            before = delivery.begun
            server.signal(signal.SIGSTOP)
            stalled = await worker.post("/reset")
            begun = delivery.begun - before
            server.signal(signal.SIGCONT)
            await until(lambda: delivery.returned == delivery.begun, "the cut resend's call returned")
            retried = await worker.post("/reset")
            answers = [stalled.status_code, stalled.headers.get("retry-after"), retried.json()]
            return [begun, [*answers, len(session.holdings)]]

    begun, seen = asyncio.run(run())
    assert begun <= 1, f"{begun} resends begun on the stalled server"  # the first may be cut unsent
    assert seen == [503, "1", {"released": 0, "dead_lettered": 0}, 0]
    stats = session.stats
    assert (stats.claimed, stats.accepted + stats.duplicate) == (2, 2)
    assert (stats.stale, stats.failed, stats.released, stats.lost, stats.cancelled) == (0, 0, 0, 0, 0)
    progress = Delivery.from_url(server.url).progress("s")
    assert (progress.done, progress.queued, progress.running) == (2, 0, 0)


REPORT_WINDOW_S = 600.0  # the /done's own retry window: what the reset waited out before
GUARD_S = 60.0  # the test's own guard on the reset: far past the bound, far short of that window


def test_a_reset_finding_a_done_in_flight_on_a_stalled_redis_503s_within_the_bound_and_its_retry_ends_it_once(
    server: EmbeddedServer,
) -> None:
    """A ``/done`` in flight on a stalled Redis (sent after the SIGSTOP, retrying), then ``/reset``:
    503 with ``Retry-After`` while that ``/done`` is still unanswered (before: the reset waited out
    the ``/done``'s own retry window, here far past the test's guard). Redis back, the ``/done``
    lands and the retried reset hands back nothing: the lease ends once, accepted."""
    publish(Delivery.from_url(server.url), "s", {"w0": [item("a", 0, 10)]}, 600_000)
    client = hangable(server.url, socket_timeout=SOCKET_TIMEOUT_S, **REPLY_DECODING)
    session = WorkerSession(Delivery(client), Holdings(1), SessionSettings("w0", retry_for_s=REPORT_WINDOW_S))

    async def run() -> list[Any]:
        async with serving(session, release_within_s=WITHIN_S) as (worker, _):
            lease = (await worker.get("/next")).json()
            server.signal(signal.SIGSTOP)
            done = asyncio.create_task(worker.post("/done", json=report_body("done", lease)))
            await until(lambda: any(h.completing for h in session.holdings.all()), "the /done in flight")
            async with asyncio.timeout(GUARD_S):
                stalled = await worker.post("/reset")
            in_flight = not done.done()
            server.signal(signal.SIGCONT)
            answered = (await done).json()
            retried = await worker.post("/reset")
            answers = [stalled.status_code, stalled.headers.get("retry-after"), in_flight]
            return [*answers, answered["outcome"], retried.json(), len(session.holdings)]

    assert asyncio.run(run()) == [503, "1", True, "accepted", {"released": 0, "dead_lettered": 0}, 0]
    stats = session.stats
    assert (stats.claimed, stats.accepted, stats.released, stats.lost, stats.stale) == (1, 1, 0, 0, 0)
    progress = Delivery.from_url(server.url).progress("s")
    assert (progress.done, progress.queued, progress.running) == (1, 0, 0)

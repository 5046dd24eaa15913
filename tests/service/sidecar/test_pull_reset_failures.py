"""``POST /reset`` sends an unanswered failure report once more before it hands the leases back, as
it sends a kept ``/done``'s result, within the same bound; one still unanswered makes it a 503.

A ``/fail`` Redis never answered (or the hold bound's report) keeps its lease held for a retry that a
dead worker process never sends. The reset handed that lease back: a landed failure's hand-back was
refused and counted ``lost``, and one that had not landed was released, its attempt refunded (the
worker's failure lost, the item served again as if it had never failed). Now the failure is sent
again first: ``failed`` either way (its repeat answered DUPLICATE, or taken now).

The stalled case SIGSTOPs the test's own server (``server`` fixture, as ``test_pull_reset_stalled``):
the client's socket timeout is long and the bound short, so a resend on the stalled server is cut by
the bound whatever the load; no wall-clock figure is asserted.
"""

from __future__ import annotations

import signal
from typing import Any

import httpx
import pytest
import redis

from service.delivery.hangable import hangable
from service.delivery.protocol import Delivery
from service.delivery.scripts import script_source
from service.delivery.stored import REPLY_DECODING
from service.embedded import EmbeddedServer
from service.sidecar.holdings import Holdings
from service.sidecar.pull_state import PullState
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.lease_ends import ends_of
from tests.service.sidecar.procs import item, publish
from tests.service.sidecar.pullclient import serve
from tests.service.sidecar.unanswered import UnansweredReports, pull_fail_unanswered, unanswered_session

SOCKET_TIMEOUT_S = 10.0  # what a call on the stalled server waits for
WITHIN_S = 1.0  # the release grace: the reset's bound on its resends


def _attempts(redis_url: str) -> int:
    """The attempts ``a#0`` spent: its next lease's ``attempt`` less one."""
    (lease,) = Delivery.from_url(redis_url).claim("s", "w0", 1)
    return lease.attempt - 1


@pytest.mark.parametrize("lands", [True, False], ids=["landed", "never landed"])
def test_a_reset_sends_an_unanswered_fail_again_before_the_hand_back_and_counts_it_failed_once(
    redis_client: redis.Redis, redis_url: str, lands: bool
) -> None:
    """Before: landed, the hand-back was refused (``lost``); never landed, it was released with its
    attempt refunded (``released``, the worker's failure forgotten)."""
    publish(Delivery.from_url(redis_url), "s", {"w0": [item("a", 0, 10)]}, lease_ttl_ms=600_000)
    delivery, session = unanswered_session(redis_url, lands)

    async def script(worker: httpx.AsyncClient, state: PullState) -> list[Any]:
        _, unanswered = await pull_fail_unanswered(worker, delivery)
        reset = await worker.post("/reset")
        return [unanswered, reset.status_code, reset.json(), len(session.holdings)]

    assert serve(session, script) == [503, 200, {"released": 0, "dead_lettered": 0}, 0]
    assert (session.stats.claimed, ends_of(session.stats)) == (1, {"failed": 1})
    assert _attempts(redis_url) == 1  # the failure spent it, once


def test_a_reset_on_a_stalled_redis_with_an_unanswered_fail_503s_and_its_retry_counts_it_failed_once(
    server: EmbeddedServer,
) -> None:
    """The ``/fail`` landed, its answer lost; Redis stalled, ``/reset`` is a 503 with ``Retry-After``
    once the bound cut the resend, nothing handed back (before: the resend was never sent, and the
    hand-back, on the stalled server, left the lease ``lost``). Redis back, the retried reset sends
    it again: DUPLICATE, ``failed``, and nothing is left to hand back."""
    publish(Delivery.from_url(server.url), "s", {"w0": [item("a", 0, 10)]}, lease_ttl_ms=600_000)
    client = hangable(server.url, socket_timeout=SOCKET_TIMEOUT_S, **REPLY_DECODING)
    client.script_load(script_source("release"))  # a live sidecar's is loaded: no NOSCRIPT on resume
    delivery = UnansweredReports(client, lands=True)
    session = WorkerSession(delivery, Holdings(1), SessionSettings("w0", retry_for_s=0.0))

    async def script(worker: httpx.AsyncClient, state: PullState) -> list[Any]:
        _, unanswered = await pull_fail_unanswered(worker, delivery)
        server.signal(signal.SIGSTOP)
        try:
            stalled = await worker.post("/reset")
        finally:
            server.signal(signal.SIGCONT)
        retried = await worker.post("/reset")
        answers = [stalled.status_code, stalled.headers.get("retry-after"), retried.json()]
        return [unanswered, *answers, len(session.holdings)]

    seen = serve(session, script, release_within_s=WITHIN_S)
    assert seen == [503, 503, "1", {"released": 0, "dead_lettered": 0}, 0]
    assert (session.stats.claimed, ends_of(session.stats)) == (1, {"failed": 1})
    assert _attempts(server.url) == 1

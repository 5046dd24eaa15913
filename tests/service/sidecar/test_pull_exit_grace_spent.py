"""A pull sidecar whose second signal's grace is already spent when Redis stalls (a CPU-starved process
still shutting down, then a SIGSTOP) ends without waiting on Redis: each step left gets its minimum
try (``hurry.MIN_TRY_S``) and the hang-up ends the calls it cut, so the exit is not a socket timeout
late.

chaos10 saw one such exit 3.28 s after the second signal (docs/sidecar.md: within 2 s), a Redis
SIGSTOP having begun 2.2 s after it at load 17. Read and measured (helper sidecar47): no Redis command
of that path goes without a bound; what is left past the grace is a tenth of a second per step that
has Redis work (the hand-back, the presence key's delete), the rest the starved process's own pace.
This holds the path to that: a call added without a bound would wait out the client's socket timeout.
"""

from __future__ import annotations

import asyncio
import signal
import time

from service.delivery.hangable import hangable
from service.delivery.protocol import Delivery
from service.embedded import EmbeddedServer
from service.sidecar.holdings import Holdings
from service.sidecar.hurry import Hurry
from service.sidecar.pull_api import create_pull_app
from service.sidecar.session import RELEASE_GRACE_S, SessionSettings, WorkerSession
from tests.service.sidecar.procs import item, publish
from tests.service.sidecar.pullclient import asgi_client

SOCKET_TIMEOUT_S = 5.0  # the sidecar's client's (``launch._client_args``): what an unbounded call waits


def test_a_pull_exit_whose_grace_is_spent_before_redis_stalls_waits_on_no_redis_call(
    server: EmbeddedServer,
) -> None:
    publish(Delivery.from_url(server.url), "s", {"w0": [item("a", 0, 10)]}, lease_ttl_ms=60_000)
    client = hangable(server.url, socket_timeout=SOCKET_TIMEOUT_S, socket_connect_timeout=2.0)
    session = WorkerSession(Delivery(client), Holdings(4), SessionSettings("w0"))
    hurry, stopping = Hurry(grace_s=RELEASE_GRACE_S), [False]
    app = create_pull_app(session, stopping=lambda: stopping[0], hurry=hurry)
    stalled = [0.0]

    async def held_then_stalled_past_the_grace() -> int:
        async with app.router.lifespan_context(app):
            async with asgi_client(app) as worker:
                while (status := (await worker.get("/next", params={"wait_s": 1})).status_code) == 204:
                    pass  # the takeover first
            stopping[0] = True
            hurry.set()
            hurry.at = time.monotonic() - 3 * RELEASE_GRACE_S  # the grace spent while it was starved
            server.signal(signal.SIGSTOP)
            stalled[0] = time.monotonic()
        return status

    try:
        assert asyncio.run(held_then_stalled_past_the_grace()) == 200
        took_s = time.monotonic() - stalled[0]  # the lifespan's end and asyncio's join of its threads
    finally:
        server.signal(signal.SIGCONT)
    assert took_s < SOCKET_TIMEOUT_S  # measured 0.2 s: the hand-back's and the leave's minimum tries
    assert (session.stats.claimed, session.stats.lost) == (1, 1)  # left to lapse, counted

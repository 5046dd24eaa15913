"""A pull sidecar's shutdown reports failed the items its hang bound was failing when it came: none is
left leased by nobody.

Why. A beat takes each item held past its bound (``PullState.abandon``) out of the holdings, then
reports it failed (``fail_abandoned``), one at a time. The shutdown cancels the beat before it hands
back what is held (``create_pull_app``'s lifespan), as the push drain cancels its loops (exit55): the
item whose report was under way and those not yet reported were in no holding, so neither failed nor
handed back; counted ``lost``, their leases held by nobody until they lapsed. A cut beat now holds
them again with their failure report, which the shutdown sends (``PullState._cut``).

Two items past their bound, the first one's failure report held on Redis until the beat is cancelled
(so the shutdown always meets it under way, whatever the host's load), the second's never sent.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
import redis

from service.delivery.protocol import Delivery
from service.sidecar.holdings import Holdings
from service.sidecar.pull_api import create_pull_app
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.procs import item, publish
from tests.service.sidecar.pullclient import asgi_client

WAIT_S = 60.0  # a bound against never, for a loaded host
HOUR_MS = 3_600_000  # leases that do not lapse while the test runs
HEARTBEAT_S = 1200.0  # nor does a beat of the heartbeat loop come


def test_items_the_hang_bound_was_failing_at_the_shutdown_are_failed_not_left_leased(
    redis_client: redis.Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "held", {"w0": [item("a", 0, 10), item("b", 0, 10)]}, lease_ttl_ms=HOUR_MS)
    clock = [0.0]
    holdings = Holdings(2, clock=lambda: clock[0])
    session = WorkerSession(delivery, holdings, SessionSettings("w0", heartbeat_interval_s=HEARTBEAT_S))
    sending, cut = threading.Event(), threading.Event()
    fail = delivery.fail

    def fail_after_the_cut(*args: Any, **kwargs: Any) -> Any:
        if not cut.is_set():
            sending.set()
            cut.wait(WAIT_S)
        return fail(*args, **kwargs)

    monkeypatch.setattr(delivery, "fail", fail_after_the_cut)

    async def stopped_while_the_hang_bound_reports() -> None:
        app = create_pull_app(session, hold_timeout_s=100.0)
        state = app.state.pull

        async def beat_until_cut() -> None:  # the heartbeat loop's beat, cancelled by the shutdown
            try:
                await state.beat()
                await asyncio.get_running_loop().create_future()
            finally:
                cut.set()

        async with app.router.lifespan_context(app):  # shutdown runs when the block ends
            async with asgi_client(app) as client:
                while (await client.get("/ready")).status_code != 200:  # connected, takeover done
                    await asyncio.sleep(0.01)
                assert [(await client.get("/next")).status_code for _ in range(2)] == [200, 200]
            clock[0] = 101.0  # past the bound: the beat drops both, then reports them failed
            state.loops.start("heartbeat loop (hang bound)", beat_until_cut())
            assert await asyncio.to_thread(sending.wait, WAIT_S)

    asyncio.run(stopped_while_the_hang_bound_reports())
    stats = session.stats
    assert (stats.claimed, stats.failed, stats.lost, len(holdings)) == (2, 2, 0, 0)
    # requeued with an attempt spent, not leased until the hour is out (the session's client is hung up)
    claimed = Delivery.from_url(redis_url).claim("held", "w0", 2)
    assert sorted((lease.key, lease.attempt) for lease in claimed) == [("a#0", 2), ("b#0", 2)]

"""The pull API's shutdown hands back what its worker held within the release grace counted from the
drain's deadline, not from when the server got round to the app's shutdown.

uvicorn runs the lifespan's shutdown up to a tick (0.1 s) after the drain is over, or later on a busy
host: a grace counted from then let the exit run past ``--drain-timeout`` plus the grace that
docs/sidecar.md promises. Here the shutdown comes well after the drain's deadline, so a grace counted
from the deadline leaves the hand-back less than the whole grace; one counted from the shutdown
gives it all of it.
"""

from __future__ import annotations

import asyncio

import pytest
import redis

from service.delivery.protocol import Delivery
from service.sidecar.holdings import Holdings
from service.sidecar.pull_api import create_pull_app
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.pullclient import asgi_client, publish_one
from tests.service.sidecar.spies import hand_back_bounds

DRAIN_S = 0.1
GRACE_S = 2.0
LATE_S = 1.5  # how long after the drain's deadline the shutdown comes


def test_the_hand_back_at_shutdown_gets_what_is_left_of_the_grace_after_the_drain_deadline(
    redis_client: redis.Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish_one(redis_url, "s")
    session = WorkerSession(Delivery.from_url(redis_url), Holdings(4), SessionSettings("w0"))
    given = hand_back_bounds(session, monkeypatch)
    stopping = asyncio.Event()

    async def run() -> None:
        app = create_pull_app(session, stopping=stopping.is_set, release_within_s=GRACE_S, drain_s=DRAIN_S)
        async with app.router.lifespan_context(app):  # shutdown runs when the block ends
            async with asgi_client(app) as client:
                while (await client.get("/ready")).status_code != 200:  # connected, takeover done
                    await asyncio.sleep(0.01)
                assert (await client.get("/next")).status_code == 200
            stopping.set()
            await asyncio.sleep(DRAIN_S + LATE_S)

    asyncio.run(run())
    [within_s] = given
    # at most the grace less the time past the deadline (a loaded host only makes it less)
    assert within_s < GRACE_S - LATE_S / 2
    assert session.stats.released == 1  # handed back in that time all the same

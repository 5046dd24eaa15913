"""A push sidecar's drain hands back within the shutdown's deadline, counted from the stop.

docs/sidecar.md promises the exit within ``--drain-timeout`` plus the release grace (2 s): the
unstarted leases are handed back at once, with until the drain's deadline to land, and the
unfinished ones at its end, with until the deadline plus the grace. A hand-back bounded by the
grace from whenever it starts would give the first too little (a slow Redis's release abandoned,
the leases left to lapse, while the drain had time) and the last the wrong end.
"""

from __future__ import annotations

import asyncio

import pytest

from service.delivery.protocol import Delivery
from service.sidecar.engine_client import EngineClient, EngineOptions
from service.sidecar.holdings import Holdings
from service.sidecar.runner import RunnerSettings, Sidecar
from service.sidecar.session import RELEASE_GRACE_S, SessionSettings, WorkerSession
from tests.service.sidecar.spies import hand_back_bounds

DRAIN_S = 10.0


def test_the_drains_hand_backs_are_bounded_by_its_deadline_then_by_the_deadline_plus_the_grace(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = WorkerSession(Delivery.from_url(redis_url), Holdings(2), SessionSettings("w0"))
    given = hand_back_bounds(session, monkeypatch)
    engine = EngineClient.open(EngineOptions("http://127.0.0.1:9"))  # refused: nothing is claimed
    sidecar = Sidecar(session, engine, RunnerSettings(idle_poll_s=0.02, drain_timeout_s=DRAIN_S))

    async def stopped() -> None:
        stop = asyncio.Event()
        run = asyncio.create_task(sidecar.run(stop))
        await sidecar.takeover.done.wait()
        stop.set()
        try:
            await asyncio.wait_for(run, 30.0)
        finally:
            await engine.aclose()

    asyncio.run(stopped())
    unstarted, unfinished = given[-2:]
    assert unstarted > DRAIN_S / 2  # the drain's time, less what a loaded host took to get there
    assert unstarted < unfinished <= unstarted + RELEASE_GRACE_S

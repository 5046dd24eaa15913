"""A push sidecar's shutdown waits, within the drain's time, for a hand-back its engine watch has under
way: the leases it took go back to their queue and are counted ``released``.

Why. At a stall the engine watch (``Sidecar._engine_stalled``, a loop of its own) hands back every lease
held, each taken out of the holdings as its release starts. A stop that came meanwhile drained what the
holdings still had, nothing of those, and then cancelled the loops, the watch's release with them: its
leases were counted ``lost`` and held by nobody until they lapsed, handed back by no one (exit55).

The loop here runs the watch's hand-back (``WorkerSession.hand_back`` of what is held, as the stall's
does) on the real session and Redis; its release's Redis call waits until the drain has returned,
so that the stop always meets it under way, whatever the host's load.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from service.delivery.protocol import Delivery
from service.sidecar import runner
from service.sidecar.engine_client import EngineClient, EngineOptions
from service.sidecar.holdings import Holdings
from service.sidecar.push_drain import drain
from service.sidecar.runner import RunnerSettings, Sidecar
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.procs import item, publish

WAIT_S = 60.0  # a bound against never, for a loaded host


@pytest.mark.parametrize("drain_s", [1.0, 3_600.0])
def test_a_hand_back_the_engine_watch_has_under_way_at_the_stop_lands_before_the_exit(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, drain_s: float
) -> None:
    """Within a drain's time of an hour too: the exit follows the hand-back's end, not the drain's."""
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "stalled", {"w0": [item("p", 0, 10)]}, lease_ttl_ms=60_000)
    session = WorkerSession(delivery, Holdings(2), SessionSettings("w0", steal=False))
    engine = EngineClient.open(EngineOptions("http://127.0.0.1:9"))  # refused: the main loop claims nothing
    sidecar = Sidecar(session, engine, RunnerSettings(idle_poll_s=0.02, drain_timeout_s=drain_s))
    sending, drained = threading.Event(), threading.Event()
    release = delivery.release

    def release_after_the_drain(*args: Any, **kwargs: Any) -> Any:
        sending.set()
        drained.wait(WAIT_S)
        return release(*args, **kwargs)

    async def drain_then_say_so(*args: Any, **kwargs: Any) -> float:
        ends = await drain(*args, **kwargs)
        drained.set()
        return ends

    monkeypatch.setattr(delivery, "release", release_after_the_drain)
    monkeypatch.setattr(runner, "drain", drain_then_say_so)

    async def watch_hands_back() -> None:  # the stall's hand-back, then the loop lives on
        # the stall's own grace (RELEASE_GRACE_S, 2 s) would run out on a loaded host before the stop
        # reached the drain: the release is held until the drain returns, so the bound is WAIT_S
        await session.hand_back(session.holdings.all(), WAIT_S)
        await asyncio.get_running_loop().create_future()

    async def stopped_during_the_hand_back() -> None:
        stop = asyncio.Event()
        run = asyncio.create_task(sidecar.run(stop))
        try:
            await sidecar.takeover.done.wait()
            assert [held.lease.key for held in await session.claim(1)] == ["p#0"]
            sidecar.loops.start("engine watch loop (stalled)", watch_hands_back())
            assert await asyncio.to_thread(sending.wait, WAIT_S)
            stop.set()
            await asyncio.wait_for(run, WAIT_S)
        finally:
            drained.set()
            await engine.aclose()

    asyncio.run(stopped_during_the_hand_back())
    assert (session.stats.released, session.stats.lost) == (1, 0)
    assert delivery.claim("stalled", "w0", 1)[0].key == "p#0"  # back in its queue, not left leased

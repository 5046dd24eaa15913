"""A beat that fails to list what it dropped past the hold bound still gives each turn up, and holds
each dropped lease again with its failure report, which the next beat sends.

``PullState.abandon`` takes the turn of each lease it drops (``report_turns.py``); the beat gives them
up in a ``finally``, and holds again (``failing``) those never reported failed (counted ``lost`` and
left to lapse before embedlog55: ``PullState._cut``). Listing the dropped items for
``GET /leases`` (``lease_json``) ran before that ``try``: an item whose ``params`` do not make a dict
(a payload written to Redis outside the API) raised there, its turn was never given up (kept in the
session's turns for good, the lease ``busy``) and its lease, dropped from the holdings and never
reported, was counted nowhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses

import redis

from service.delivery.protocol import Delivery
from service.sidecar.holdings import Holdings, lease_id
from service.sidecar.pull_state import PullState
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.procs import item, publish


def test_an_item_a_beat_cannot_list_gives_its_turn_up_and_is_failed_by_the_next_beat(
    redis_client: redis.Redis, redis_url: str
) -> None:
    odd = item("a", 0, 10)
    odd = dataclasses.replace(odd, payload={**odd.payload, "params": [1, 2]})
    publish(Delivery.from_url(redis_url), "s", {"w0": [odd]}, lease_ttl_ms=600_000)
    clock = [0.0]
    holdings = Holdings(2, clock=lambda: clock[0])
    session = WorkerSession(Delivery.from_url(redis_url), holdings, SessionSettings("w0"))
    state = PullState(session, idle_timeout_s=600.0, hold_timeout_s=100.0)

    async def run() -> None:
        [held] = await session.claim(1)
        holdings.start(held)  # handed to the worker
        clock[0] = 101.0  # past its bound
        with contextlib.suppress(TypeError):  # ``sample_params``: dict([1, 2])
            await state.beat()
        assert not session.turns.busy(lease_id(held.lease))
        assert (held.failing, holdings.get(lease_id(held.lease))) == (True, held)
        await state.beat()  # a failing lease is not listed again: its failure report goes out

    asyncio.run(run())
    stats = session.stats
    assert (stats.claimed, stats.failed, stats.lost, len(holdings)) == (1, 1, 0, 0)

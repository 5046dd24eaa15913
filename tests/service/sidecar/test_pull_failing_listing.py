"""A lease whose hold-bound failure report Redis never answered (``Held.failing``) is held again so
the next beat sends the report once more, but for the worker it is gone: ``GET /leases`` lists it
lost once and never among the held, and the warning that it went unreported is logged once, not at
every beat that sends its report again."""

from __future__ import annotations

import logging

import httpx
import pytest
import redis

from service.delivery.protocol import Delivery
from service.sidecar.pull_state import PullState
from tests.service.sidecar.procs import item, publish
from tests.service.sidecar.pullclient import serve
from tests.service.sidecar.unanswered import one_slot_session

BOUND_S = 100.0


def test_a_lease_whose_failure_report_is_sent_again_is_not_listed_held_and_warned_of_once(
    redis_client: redis.Redis, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    publish(Delivery.from_url(redis_url), "s", {"w0": [item("a", 0, 10)]}, lease_ttl_ms=600_000)
    delivery, clock, session = one_slot_session(redis_url, lands=False)

    async def script(client: httpx.AsyncClient, state: PullState) -> list[object]:
        await client.get("/next")
        clock[0] = BOUND_S + 1
        delivery.out.set()
        await state.beat()
        await state.beat()  # still unanswered: sent again
        listed = (await client.get("/leases")).json()
        delivery.out.clear()
        await state.beat()  # answered: failed, requeued
        return [listed["held"], [one["key"] for one in listed["lost"]], session.stats.failed]

    with caplog.at_level(logging.WARNING, logger="service.sidecar"):
        seen = serve(session, script, hold_timeout_s=BOUND_S)
    assert seen == [[], ["a#0"], 1]
    unreported = [r for r in caplog.records if "unreported: reporting it failed" in r.getMessage()]
    assert len(unreported) == 1

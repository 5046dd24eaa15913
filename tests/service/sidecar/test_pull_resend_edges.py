"""Edges of the pull sidecar's resends of unanswered reports. The mirror order's resend records what
a landed ``/done`` records (``Resends.result_first``): the ``/done`` landed, its answer lost (503),
the worker's ``/fail`` of the lease is refused and the kept result is sent again, answered DUPLICATE;
that answer is the first the result got, so it records the result's generation seconds
(``GET /metrics``: observed once), as a first answer or a heartbeat's resend would
(``PullState.landed``). The hold bound, sending again a ``/fail`` the worker did send, does not warn
that the item was held unreported. A report refused after an unanswered one that never landed (the
lease lapsed) tells the worker its lease was lost, not that the first report took it; and a lease
already listed lost (``failing``) is not listed a second time when a reset's resend is refused. Kills
mutants
that survived round 46's tests (helper mutants10, docs/experiments.md)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
import redis

from service.sidecar.pull_state import PullState
from tests.service.sidecar.pull_resends import (
    lapse,
    lapsing_pull,
    one_item_published,
    results_unanswered_session,
    serve_bounded,
    unanswered_fail_held_past_the_bound,
)
from tests.service.sidecar.pullclient import report_body, serve


def test_the_result_sent_again_after_a_refused_fail_records_its_generation_seconds_once(
    redis_client: redis.Redis, redis_url: str
) -> None:
    one_item_published(redis_url)
    delivery, _, session = results_unanswered_session(redis_url, lands=True)

    async def script(client: httpx.AsyncClient, state: PullState) -> list[Any]:
        lease = (await client.get("/next")).json()
        delivery.results_out.set()
        unanswered = (await client.post("/done", json=report_body("done", lease))).status_code
        recorded_before = state.generation.snapshot()[0][-1][1]  # results observed
        delivery.results_out.clear()
        fail = await client.post("/fail", json=report_body("fail", lease))
        return [unanswered, recorded_before, fail.json()["outcome"], state.generation.snapshot()[0][-1][1]]

    assert serve_bounded(session, script) == [503, 0.0, "stale", 1]


def test_the_hold_bound_sending_a_workers_unanswered_fail_again_does_not_call_it_unreported(
    redis_client: redis.Redis, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    _, session = unanswered_fail_held_past_the_bound(redis_url)
    assert session.stats.failed == 1
    assert "unreported" not in caplog.text


@pytest.mark.parametrize("first", ["fail", "done"])
def test_a_report_refused_after_an_unanswered_one_that_never_landed_is_told_its_lease_was_lost(
    redis_client: redis.Redis, redis_url: str, first: str
) -> None:
    """The first report (``/fail`` or ``/done``) never reached Redis, and the lease lapsed: the second
    is refused, the first sent again is refused as well, and the worker hears that its lease was lost,
    not that the first report took it (that is said only where the resend was answered DUPLICATE)."""
    delivery, session = lapsing_pull(redis_url)
    second = "done" if first == "fail" else "fail"

    async def script(worker: httpx.AsyncClient, state: PullState) -> list[Any]:
        lease: dict[str, Any] = (await worker.get("/next")).json()
        delivery.out.set()
        unanswered = (await worker.post(f"/{first}", json=report_body(first, lease))).status_code
        delivery.out.clear()
        await lapse(delivery)
        refused = await worker.post(f"/{second}", json=report_body(second, lease))
        return [unanswered, refused.json()["outcome"], refused.json()["error"]]

    unanswered, outcome, error = serve_bounded(session, script)
    assert (unanswered, outcome) == (503, "stale")
    assert "its lease was lost before this report" in error
    assert "took it" not in error


def test_a_failing_lease_refused_at_a_reset_is_listed_lost_once(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """Held past its hold bound: listed lost, and the bound's failure report goes unanswered, so the
    lease is held ``failing``. It lapses, and the reset's resend is refused: the worker was told of
    that lease already, and hears of it once, not twice."""
    delivery, session = lapsing_pull(redis_url)

    async def script(worker: httpx.AsyncClient, state: PullState) -> list[Any]:
        lease: dict[str, Any] = (await worker.get("/next")).json()
        delivery.out.set()
        await asyncio.sleep(0.05)  # past the hold bound
        await state.beat()
        failing = [held.failing for held in session.holdings.all()]
        delivery.out.clear()
        await lapse(delivery)
        reset = (await worker.post("/reset")).status_code
        lost = [x["key"] for x in (await worker.get("/leases")).json()["lost"]]
        return [lease["key"], failing, reset, lost]

    assert serve(session, script, hold_timeout_s=0.01) == ["a#0", [True], 200, ["a#0"]]

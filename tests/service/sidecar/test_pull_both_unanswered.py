"""A pull lease whose worker's ``/fail`` and then its ``/done`` both went unanswered (503 each) ends
once, as what Redis recorded, through the heartbeat's resends alone (``again``, then
``complete_held``, then ``failure_first``), and the worker is told it lost the lease once at most.

Which report landed decides: the failure (the ``/done`` then refused in Redis) ends it ``failed``,
the item requeued; the result (the failure never reached Redis) ``duplicate``; neither, the lease is
still current and its result is sent once it passes its hold bound: ``accepted``. Each resend may go
unanswered in its turn; the next beat sends it again. Before, a failure whose resend went unanswered
left the lease listed lost at every beat until one was answered (helper sidecar47).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import redis

from service.sidecar.pull_state import PullState
from tests.service.sidecar.lease_ends import ends_of
from tests.service.sidecar.pull_resends import (
    HOLD_BOUND_S,
    one_item_published,
    results_unanswered_session,
    serve_bounded,
)
from tests.service.sidecar.pullclient import report_body

CASES = [
    # (the /fail landed, the /done landed, resends unanswered at the first beat, end, listed lost)
    (True, False, "", "failed", 1),
    (True, False, "failure", "failed", 1),
    (True, False, "result", "failed", 1),
    (False, True, "", "duplicate", 0),
    (False, True, "result", "duplicate", 0),
    (False, False, "", "accepted", 0),
]


@pytest.mark.parametrize(("fail_lands", "done_lands", "out", "end", "listed"), CASES)
def test_a_lease_whose_fail_and_done_both_went_unanswered_ends_once_through_the_beats(
    redis_client: redis.Redis,
    redis_url: str,
    fail_lands: bool,
    done_lands: bool,
    out: str,
    end: str,
    listed: int,
) -> None:
    """Three beats past the hold bound: the lease ends at the first answered resend, counted once as
    the report that landed, and ``GET /leases`` lists it lost once when the failure took it."""
    store = one_item_published(redis_url)
    delivery, clock, session = results_unanswered_session(redis_url, lands=fail_lands)

    async def script(client: httpx.AsyncClient, state: PullState) -> list[Any]:
        lease = (await client.get("/next")).json()
        delivery.out.set()
        unanswered = [(await client.post("/fail", json=report_body("fail", lease))).status_code]
        delivery.lands = done_lands
        unanswered.append((await client.post("/done", json=report_body("done", lease))).status_code)
        delivery.out.clear()
        if out:
            {"failure": delivery.fails_out, "result": delivery.results_out}[out].set()
        clock[0] = HOLD_BOUND_S + 1
        lost = 0
        for _ in range(3):
            await state.beat()
            delivery.fails_out.clear()
            delivery.results_out.clear()
            lost += len((await client.get("/leases")).json()["lost"])
        return [unanswered, lost, len(session.holdings)]

    assert serve_bounded(session, script) == [[503, 503], listed, 0]
    assert (session.stats.claimed, ends_of(session.stats)) == (1, {end: 1})
    progress = store.progress("s")
    assert (progress.done, progress.queued, progress.running) == ((0, 1, 0) if end == "failed" else (1, 0, 0))

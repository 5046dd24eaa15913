"""A pull worker's ``/fail`` that Redis never answered keeps its lease held for the worker's retry;
when a heartbeat finds that lease gone first and the report, sent again, is refused (it never landed
and the lease lapsed: ``stale``), the worker is told it lost the lease (``GET /leases``), as for a
``/done`` refused so. Its failure was never taken: the item runs again elsewhere, and a worker not
told would take the lease for failed and ended here. A resend Redis does not answer either leaves
the lease held for the worker's retry, as the first one did: not forgotten into the push mode's
kept reports, which would refuse that retry a lease no longer held."""

from __future__ import annotations

from typing import Any

import httpx
import redis

from service.delivery.keys import schedule_keys
from service.sidecar.pull_state import PullState
from tests.service.sidecar.pull_resends import lapse, lapsing_pull
from tests.service.sidecar.pullclient import serve
from tests.service.sidecar.unanswered import pull_fail_unanswered


def test_a_pull_fail_never_answered_and_refused_after_its_lease_lapsed_is_listed_lost(
    redis_client: redis.Redis, redis_url: str
) -> None:
    delivery, session = lapsing_pull(redis_url)

    async def script(worker: httpx.AsyncClient, state: PullState) -> list[Any]:
        _, unanswered = await pull_fail_unanswered(worker, delivery)
        await lapse(delivery)
        await state.beat()  # finds it gone: the report sent again is refused
        listed = (await worker.get("/leases")).json()
        lost = [(x["key"], x["token"]) for x in listed["lost"]]  # listed once, this lease
        return [unanswered, lost, len(session.holdings), session.stats.stale]

    unanswered, lost, held, stale = serve(session, script)
    assert (unanswered, [key for key, _ in lost], held, stale) == (503, ["a#0"], 0, 1)


def test_a_pull_fail_whose_resend_goes_unanswered_too_stays_held_for_the_workers_retry(
    redis_client: redis.Redis, redis_url: str
) -> None:
    delivery, session = lapsing_pull(redis_url)

    async def script(worker: httpx.AsyncClient, state: PullState) -> list[Any]:
        _, unanswered = await pull_fail_unanswered(worker, delivery)
        delivery.out.set()  # Redis's answers still lost
        await lapse(delivery)
        await state.beat()  # finds it gone; the resend goes unanswered as well
        return [unanswered, len(session.holdings), len(session.resends)]

    assert serve(session, script) == [503, 1, 0]


def test_a_pull_fail_never_answered_whose_schedule_is_gone_counts_stale_and_is_not_listed_lost(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """Its keys expired (or were removed) meanwhile: the resend is refused ``NOSCHEDULE``, counted
    ``stale`` once, as a ``/done``'s resend is; nothing is left to run it again, and the worker is
    not told of a lost lease."""
    delivery, session = lapsing_pull(redis_url)

    async def script(worker: httpx.AsyncClient, state: PullState) -> list[Any]:
        _, unanswered = await pull_fail_unanswered(worker, delivery)
        redis_client.delete(*redis_client.keys(f"{schedule_keys('s').base}*"))  # the schedule expired
        await state.beat()
        listed = (await worker.get("/leases")).json()
        return [unanswered, listed, len(session.holdings), session.stats.stale]

    assert serve(session, script) == [503, {"held": [], "lost": []}, 0, 1]

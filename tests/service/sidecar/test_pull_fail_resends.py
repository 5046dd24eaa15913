"""A pull worker's ``/fail`` that Redis never answered ends its lease once, as what Redis recorded,
whichever report or beat comes next, and is sent again as the worker sent it.

``release.lua`` records the token of each failure it takes (``P:failed``) and answers its repeat
DUPLICATE (round 45, failonce). Two orders were left: a ``/done`` of the lease sent before any resend
of the failure was refused and counted ``stale`` where the failure had taken the lease (now the
refusal sends the failure again, and its answer counts the lease: ``failed``, the worker told so);
and an item whose ``/fail`` went unanswered, then held past its hold bound, was failed again with the
hold bound's reason, so a dead letter named the bound, not what the worker said.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import redis

from service.sidecar.pull_state import PullState
from tests.service.sidecar.lease_ends import ends_of
from tests.service.sidecar.pull_resends import (
    one_item_published,
    results_unanswered_session,
    serve_bounded,
    unanswered_fail_held_past_the_bound,
)
from tests.service.sidecar.pullclient import report_body
from tests.service.sidecar.unanswered import pull_fail_unanswered


@pytest.mark.parametrize("resend_answered", [True, False], ids=["resend answered", "resend unanswered"])
def test_a_done_after_a_landed_unanswered_fail_counts_the_lease_failed_once_and_tells_the_worker(
    redis_client: redis.Redis, redis_url: str, resend_answered: bool
) -> None:
    """The ``/fail`` landed, its answer lost (503); the worker's ``/done`` of the lease is refused
    (the failure took it) and the failure is sent again: DUPLICATE, ``failed``, and the 409 says the
    item was failed. Its resend unanswered too, the lease is held, listed held no more, and the next
    beat sends it: ``failed``. Before: the refusal counted ``stale`` and nothing sent the failure."""
    store = one_item_published(redis_url)
    delivery, _, session = results_unanswered_session(redis_url, lands=True)

    async def script(client: httpx.AsyncClient, state: PullState) -> list[Any]:
        lease, unanswered = await pull_fail_unanswered(client, delivery)
        if not resend_answered:
            delivery.fails_out.set()
        done = await client.post("/done", json=report_body("done", lease))
        told = [done.status_code, done.json()["outcome"], "the item was failed" in done.json()["error"]]
        held = [len((await client.get("/leases")).json()["held"]), dict(ends_of(session.stats))]
        delivery.fails_out.clear()
        await state.beat()
        return [unanswered, told, held, len(session.holdings)]

    seen = serve_bounded(session, script)
    told = [409, "stale", resend_answered]
    assert seen == [503, told, [0, {"failed": 1} if resend_answered else {}], 0]
    assert (session.stats.claimed, ends_of(session.stats)) == (1, {"failed": 1})
    after = store.progress("s")
    assert (after.done, after.queued, after.running) == (0, 1, 0)


def test_a_done_after_an_unanswered_fail_that_never_landed_is_accepted(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """The ``/fail`` never reached Redis: the lease is current and the ``/done`` is accepted, the
    result kept; the failure is not sent again (it would be refused: nothing to count twice)."""
    store = one_item_published(redis_url)
    delivery, _, session = results_unanswered_session(redis_url, lands=False)

    async def script(client: httpx.AsyncClient, state: PullState) -> list[Any]:
        lease, unanswered = await pull_fail_unanswered(client, delivery)
        done = await client.post("/done", json=report_body("done", lease))
        await state.beat()
        return [unanswered, done.status_code, done.json()["outcome"], len(session.holdings)]

    assert serve_bounded(session, script) == [503, 200, "accepted", 0]
    assert (session.stats.claimed, ends_of(session.stats)) == (1, {"accepted": 1})
    assert store.progress("s").done == 1


def test_the_hold_bound_resends_an_unanswered_fail_with_the_workers_reason(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """The worker's ``/fail`` (reason ``oom``) never reached Redis, and the worker reported nothing
    more; past its hold bound the sidecar fails the item itself, sending that report again: the dead
    letter (one attempt) names ``oom``. Before: the hold bound's own reason, ``held 101s ...``."""
    store, session = unanswered_fail_held_past_the_bound(redis_url)
    assert (session.stats.claimed, ends_of(session.stats)) == (1, {"failed": 1})
    (dead,) = store.progress("s").dead_letters
    assert (dead.key, dead.reason) == ("a#0", "oom")


@pytest.mark.parametrize("resend_answered", [True, False], ids=["resend answered", "resend unanswered"])
def test_a_fail_after_a_landed_unanswered_done_counts_the_lease_by_its_result_once(
    redis_client: redis.Redis, redis_url: str, resend_answered: bool
) -> None:
    """The mirror order (review46a): the ``/done`` landed, its answer lost (503); the worker then
    reports the item failed, which Redis refuses (the result took the lease), so the kept result is
    sent again: DUPLICATE, ``duplicate``, and the answer says the result was taken. Its resend
    unanswered too, the lease stays held with its result and the next beat ends it so. Before: the
    refusal counted ``stale`` and told the worker its lease was lost, where Redis holds its result."""
    store = one_item_published(redis_url)
    delivery, _, session = results_unanswered_session(redis_url, lands=True)

    async def script(client: httpx.AsyncClient, state: PullState) -> list[Any]:
        lease = (await client.get("/next")).json()
        delivery.results_out.set()
        unanswered = (await client.post("/done", json=report_body("done", lease))).status_code
        if resend_answered:
            delivery.results_out.clear()
        fail = await client.post("/fail", json=report_body("fail", lease))
        told = [fail.status_code, fail.json()["outcome"], "its result" in fail.json()["error"]]
        ended = dict(ends_of(session.stats))
        delivery.results_out.clear()
        await state.beat()
        return [unanswered, told, ended, len(session.holdings)]

    seen = serve_bounded(session, script)
    assert seen == [503, [200, "stale", resend_answered], {"duplicate": 1} if resend_answered else {}, 0]
    assert (session.stats.claimed, ends_of(session.stats)) == (1, {"duplicate": 1})
    assert store.progress("s").done == 1

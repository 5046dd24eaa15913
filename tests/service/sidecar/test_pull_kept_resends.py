"""A pull ``/done`` Redis never answered ends its lease as that ``/done`` did, and records what a first
answer records, once.

Its result is kept and the lease held for the worker's retry (``resends.py``). Past its hold bound the
lease was reported failed as a dropped item is: refused ``stale`` when the ``/done`` had landed (its
end a completion), and when it had not, the item ran again with an attempt spent, its result thrown
away. It is now sent once more instead (``PullState.resend_overdue``): ``duplicate`` or ``accepted``.
And a resend that landed recorded neither the generation seconds (``GET /metrics``) nor the decode
rate (KV admission, the hold bound) that an answered ``/done`` records.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
import redis

from service.delivery.hangable import hangable
from service.delivery.outcomes import CompletionOutcome
from service.delivery.protocol import Delivery
from service.delivery.stored import REPLY_DECODING
from service.sidecar.holdings import Holdings
from service.sidecar.pull_state import PullState
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.lease_ends import ends_of
from tests.service.sidecar.procs import item, publish
from tests.service.sidecar.pullclient import StateScript, report_body, serve, serving
from tests.service.sidecar.unanswered import UnansweredCompletions

BOUND_S = 100.0  # the hold bound the tests run under (``hold_timeout_s``)
GENERATED_S = 5.0  # the worker's /done comes this long after its /next: the result's wall time


def _unanswered_done(redis_url: str, lands: bool) -> tuple[UnansweredCompletions, WorkerSession, list[float]]:
    """A session of one slot on schedule ``s`` (10-minute leases) whose completions go unanswered
    while ``out`` is set, its holdings on the returned clock."""
    publish(Delivery.from_url(redis_url), "s", {"w0": [item("a", 0, 10)]}, lease_ttl_ms=600_000)
    delivery = UnansweredCompletions(hangable(redis_url, **REPLY_DECODING), lands)  # as a sidecar's
    clock = [0.0]
    holdings = Holdings(1, clock=lambda: clock[0])
    return delivery, WorkerSession(delivery, holdings, SessionSettings("w0", retry_for_s=0.0)), clock


async def _done_unanswered(
    client: httpx.AsyncClient, delivery: UnansweredCompletions, clock: list[float]
) -> dict[str, Any]:
    """The worker's lease, its /done (10 tokens, ``GENERATED_S`` after /next) answered 503."""
    lease: dict[str, Any] = (await client.get("/next")).json()
    clock[0] = GENERATED_S
    delivery.out.set()
    assert (await client.post("/done", json=report_body("done", lease))).status_code == 503
    delivery.out.clear()  # Redis answers again; the worker does not retry (it died, or gave up)
    return lease


def _serve(session: WorkerSession, script: StateScript) -> list[Any]:
    """What ``script(client, state)`` returns, as a list, against a pull app of hold bound ``BOUND_S``."""
    return list(serve(session, script, hold_timeout_s=BOUND_S))


def _recorded(state: PullState) -> tuple[float, float, float | None]:
    """(generation seconds observed, their sum, the decode rate learnt)."""
    buckets, total = state.generation.snapshot()
    return buckets[-1][1], total, state.session.holdings.decode_rate()


def _retried_before_a_beat(redis_url: str, lands: bool) -> tuple[list[Any], WorkerSession]:
    """A ``/done`` unanswered (landed or not), then the worker's retry of it ``3 * GENERATED_S`` after
    its ``/next``, before any heartbeat: [the retry's outcome, what was recorded], and the session."""
    delivery, session, clock = _unanswered_done(redis_url, lands)

    async def script(client: httpx.AsyncClient, state: PullState) -> list[Any]:
        lease = await _done_unanswered(client, delivery, clock)
        clock[0] = 3 * GENERATED_S
        retried = await client.post("/done", json=report_body("done", lease))
        return [retried.json()["outcome"], _recorded(state)]

    return _serve(session, script), session


@pytest.mark.parametrize(("lands", "ended"), [(True, {"duplicate": 1}), (False, {"accepted": 1})])
def test_a_done_unanswered_and_held_past_its_bound_is_sent_again_not_failed(
    redis_client: redis.Redis, redis_url: str, lands: bool, ended: dict[str, int]
) -> None:
    """Before: landed, ``{"stale": 1}`` (the failure refused); not landed, ``{"failed": 1}``, the item
    requeued and its result dropped. Either way listed lost."""
    delivery, session, clock = _unanswered_done(redis_url, lands)

    async def script(client: httpx.AsyncClient, state: PullState) -> list[Any]:
        await _done_unanswered(client, delivery, clock)
        clock[0] = BOUND_S + 1  # past its bound
        await state.beat()
        return [len(state.lost), len(session.holdings), _recorded(state)]

    assert _serve(session, script) == [0, 0, (1.0, GENERATED_S, 10 / GENERATED_S)]
    assert ends_of(session.stats) == ended
    progress = Delivery.from_url(redis_url).progress("s")
    assert (progress.queued, progress.running, progress.done) == (0, 0, 1)


def test_a_resend_that_lands_at_a_heartbeat_records_it_once_and_the_workers_retry_adds_nothing(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """The ``/done`` landed unanswered; the heartbeat finds the lease gone and its resend is
    answered ``duplicate`` (pullrace's case), well within the bound. Before: nothing recorded,
    ``(0, 0.0, None)``; the worker's retry after it, answered ``duplicate`` too, records nothing."""
    delivery, session, clock = _unanswered_done(redis_url, lands=True)

    async def script(client: httpx.AsyncClient, state: PullState) -> list[Any]:
        lease = await _done_unanswered(client, delivery, clock)
        await state.beat()
        resent = _recorded(state)
        clock[0] = 2 * GENERATED_S
        retried = await client.post("/done", json=report_body("done", lease))
        return [resent, retried.json()["outcome"], _recorded(state)]

    once = (1.0, GENERATED_S, 10 / GENERATED_S)
    assert _serve(session, script) == [once, "duplicate", once]
    assert ends_of(session.stats) == {"duplicate": 1}


def test_a_retry_answered_duplicate_of_a_held_lease_records_the_landed_done_once(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """The worker retries before any heartbeat: the lease still held, its retry is answered
    ``duplicate`` (the first landed). The generation seconds are that first ``/done``'s (the one
    Redis stored), not the retry's, which also counts the outage. Before: none recorded."""
    answer, session = _retried_before_a_beat(redis_url, lands=True)
    assert answer == ["duplicate", (1.0, GENERATED_S, 10 / GENERATED_S)]
    assert ends_of(session.stats) == {"duplicate": 1}


def test_a_retry_accepted_after_an_unanswered_done_stores_the_span_up_to_that_first_done(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """The first ``/done`` never landed; the worker's retry, 10 s later, is accepted. Its result is
    the trajectory's: the wall time and mean concurrency the sidecar measured up to the first
    ``/done`` (what speed learning divides), not a span stretched by the outage. Before: 15 s stored
    and recorded."""
    answer, _ = _retried_before_a_beat(redis_url, lands=False)
    assert answer == ["accepted", (1.0, GENERATED_S, 10 / GENERATED_S)]
    (stored,) = Delivery.from_url(redis_url).read_results("s")
    assert (stored.result.wall_time_s, stored.result.extra["concurrency"]) == (GENERATED_S, 1.0)


def _handed_back(redis_url: str, lands: bool, how: str) -> tuple[list[Any], WorkerSession]:
    """A ``/done`` unanswered (landed or not), then the lease handed back: by ``POST /reset`` (a new
    worker process) or by the shutdown (the app's lifespan ending). The reset's answer, and the
    session."""
    delivery, session, clock = _unanswered_done(redis_url, lands)

    async def run() -> list[Any]:
        # with the lifespan (the shutdown), its hand-back runs as the block ends
        async with serving(session, lifespan=how == "shutdown", hold_timeout_s=BOUND_S) as (client, _):
            while (await client.get("/ready")).status_code != 200:  # the takeover done
                await asyncio.sleep(0.01)
            await _done_unanswered(client, delivery, clock)
            if how == "reset":
                return [(await client.post("/reset")).json()]
        return []

    return asyncio.run(run()), session


@pytest.mark.parametrize("how", ["reset", "shutdown"])
@pytest.mark.parametrize(("lands", "ended"), [(True, {"duplicate": 1}), (False, {"accepted": 1})])
def test_a_done_unanswered_is_sent_again_before_its_lease_is_handed_back(
    redis_client: redis.Redis, redis_url: str, lands: bool, ended: dict[str, int], how: str
) -> None:
    """Before: landed, the hand-back was refused and the lease counted ``lost``; not landed, it was
    released (``released``): the item ran again, its result dropped."""
    answer, session = _handed_back(redis_url, lands, how)
    assert answer == ([{"released": 0, "dead_lettered": 0}] if how == "reset" else [])
    assert ends_of(session.stats) == ended
    progress = Delivery.from_url(redis_url).progress("s")
    assert (progress.queued, progress.running, progress.done) == (0, 0, 1)


@pytest.mark.parametrize(("lands", "ended"), [(True, {"duplicate": 1}), (False, {"accepted": 1})])
def test_a_kept_done_sent_again_before_a_hand_back_and_answered_lists_nothing_lost(
    redis_client: redis.Redis, redis_url: str, lands: bool, ended: dict[str, int]
) -> None:
    """``resend_kept`` lists lost only a resend refused ``stale`` (its lease lapsed): a ``duplicate``
    (the first /done had landed) or an ``accepted`` one ended as the worker reported it."""
    delivery, session, clock = _unanswered_done(redis_url, lands)

    async def script(client: httpx.AsyncClient, state: PullState) -> list[Any]:
        await _done_unanswered(client, delivery, clock)
        await state.resend_kept()
        return [len(state.lost), len(session.holdings)]

    assert _serve(session, script) == [0, 0]
    assert ends_of(session.stats) == ended


def test_a_resend_refused_stale_records_its_speed_but_no_generation_seconds(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """``landed`` of a ``stale`` answer: the tokens and wall time still teach the decode rate, but no
    result landed, so ``GET /metrics``'s generation seconds count nothing."""
    delivery, session, clock = _unanswered_done(redis_url, lands=False)

    async def script(client: httpx.AsyncClient, state: PullState) -> list[Any]:
        await _done_unanswered(client, delivery, clock)
        (held,) = session.holdings.all()
        assert held.unanswered is not None
        state.landed(held, held.unanswered, CompletionOutcome.STALE)
        return [_recorded(state)[1:]]

    assert _serve(session, script) == [(0.0, 10 / GENERATED_S)]


def test_a_done_unanswered_within_its_bound_waits_for_the_worker_s_retry_not_a_beat(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """The worker was told to retry (503): until the hold bound, the beat leaves its result to that
    retry (its lease heartbeated and held), and sends it itself only past the bound."""
    delivery, session, clock = _unanswered_done(redis_url, lands=False)

    async def script(client: httpx.AsyncClient, state: PullState) -> list[Any]:
        await _done_unanswered(client, delivery, clock)
        await state.beat()
        return [len(session.holdings), ends_of(session.stats)]

    assert _serve(session, script) == [1, {}]

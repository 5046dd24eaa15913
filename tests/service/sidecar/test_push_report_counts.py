"""A push sidecar's completion or failure report that Redis never answers still ends its lease once.

docs/sidecar.md, counters: ``claimed + stolen + inherited`` balances what ended here. A report whose
answer never came (Redis down past the retry window, or the call cut by the shutdown's bound) forgot
its lease and was counted nowhere. A completion may have landed or not: ``complete.lua`` answers
DUPLICATE only for the token whose completion it accepted, so its result is kept and sent once more
at the next heartbeat (``resends.py``), and the lease ends as what it was: ``duplicate`` (it landed),
``accepted`` (it had not, and the lease was still current: the result goes through now) or ``stale``
(it had not, and the lease lapsed). One still unanswered at shutdown is left to lapse: ``lost``. A
failure report is kept and sent again alike: ``release.lua`` records the token of each failure it
takes (``P:failed``) and answers a repeat DUPLICATE, so it ends ``failed`` (landed, or taken now) or
``stale``, where it counted ``lost`` at once.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
import pytest
import redis

from service.delivery.outcomes import CompletionOutcome
from service.delivery.protocol import Delivery
from service.sidecar.engine_client import EngineClient, EngineOptions
from service.sidecar.holdings import Holdings
from service.sidecar.runner import RunnerSettings, Sidecar
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.delivery.old_release import PRE_FAILED, old_delivery
from tests.service.finished import RESULT
from tests.service.sidecar.lease_ends import ends_of
from tests.service.sidecar.procs import item, publish, run_until, tally
from tests.service.sidecar.unanswered import UnansweredReports, claim_fail_unanswered, unanswered_session

# (it landed, its lease lapsed before the heartbeat): the one counter the lease ends in
AFTER_THE_OUTAGE = {
    (True, False): {"duplicate": 1},  # it landed: answered duplicate for this very token
    (False, False): {"accepted": 1},  # it never landed, its lease still current: it goes through now
    (False, True): {"stale": 1},  # it never landed, and its lease lapsed: refused
}


@pytest.mark.parametrize(("lands", "lapses"), list(AFTER_THE_OUTAGE))
def test_a_completion_redis_never_answered_is_sent_again_at_the_next_heartbeat_and_counts_once(
    redis_client: redis.Redis, redis_url: str, lands: bool, lapses: bool
) -> None:
    """Before: nothing counted (claimed 1, ended 0), and a result that never landed was dropped."""
    publish(
        Delivery.from_url(redis_url), "s", {"w0": [item("a", 0, 10)]}, lease_ttl_ms=300 if lapses else 60_000
    )
    delivery, session = unanswered_session(redis_url, lands)

    async def run() -> list[Any]:
        (held,) = await session.claim(1)
        delivery.out.set()
        with pytest.raises(redis.ConnectionError):
            await session.complete(held, RESULT)
        unanswered = [len(session.holdings), len(session.resends), ends_of(session.stats)]
        await session.heartbeat()  # Redis still down: kept for the next one
        delivery.out.clear()
        return [*unanswered, await _beat_once_redis_is_back(session, delivery, lapses)]

    assert asyncio.run(run()) == [0, 1, {}, 0]
    assert ends_of(session.stats) == AFTER_THE_OUTAGE[(lands, lapses)]
    assert session.stats.claimed == 1
    results = Delivery.from_url(redis_url).read_results("s")
    assert [r.key for r in results] == ([] if lapses else ["a#0"])


@pytest.mark.parametrize(("answers", "ended"), [(False, {"lost": 1}), (True, {"duplicate": 1})])
def test_a_completion_still_unanswered_at_shutdown_gets_one_last_try_then_counts_lost(
    redis_client: redis.Redis, redis_url: str, answers: bool, ended: dict[str, int]
) -> None:
    """``settle``, the push drain's last step: Redis answering again by then, the kept result is
    answered as at a heartbeat; still down, the lease is left to lapse, counted ``lost``."""
    publish(Delivery.from_url(redis_url), "s", {"w0": [item("a", 0, 10)]})
    delivery, session = unanswered_session(redis_url, lands=True)

    async def run() -> None:
        (held,) = await session.claim(1)
        delivery.out.set()
        with pytest.raises(redis.ConnectionError):
            await session.complete(held, RESULT)
        if answers:
            delivery.out.clear()
        await session.resends.settle(5.0)

    asyncio.run(run())
    assert (ends_of(session.stats), len(session.resends)) == (ended, 0)


def test_a_completion_cut_by_the_shutdown_while_redis_answers_it_is_kept_and_counts_once(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """The drain cancels an item's task while its completion is on the wire (landed, the answer not
    read): kept as an unanswered one, and the drain's last try finds it landed."""
    publish(Delivery.from_url(redis_url), "s", {"w0": [item("a", 0, 10)]})
    landed, answer = threading.Event(), threading.Event()

    class _SlowAnswer(Delivery):
        def complete_many(self, *args: Any, **kwargs: Any) -> list[CompletionOutcome]:
            outcomes = super().complete_many(*args, **kwargs)
            if not landed.is_set():
                landed.set()
                answer.wait(timeout=60)
            return outcomes

    session = WorkerSession(_SlowAnswer(redis.Redis.from_url(redis_url)), Holdings(1), SessionSettings("w0"))

    async def run() -> None:
        (held,) = await session.claim(1)
        completing = asyncio.create_task(session.complete(held, RESULT))
        await asyncio.to_thread(landed.wait, 60)
        completing.cancel()  # the drain's deadline
        with pytest.raises(asyncio.CancelledError):
            await completing
        answer.set()
        await session.resends.settle(5.0)

    asyncio.run(run())
    assert ends_of(session.stats) == {"duplicate": 1}  # before: {}


# (it landed, its lease lapsed before the heartbeat): the one counter the lease ends in
FAILURE_AFTER_THE_OUTAGE = {
    (True, False): {"failed": 1},  # it landed: answered duplicate for this very token
    (False, False): {"failed": 1},  # it never landed, its lease still current: taken now
    (False, True): {"stale": 1},  # it never landed, and its lease lapsed: refused
}


@pytest.mark.parametrize(("lands", "lapses"), list(FAILURE_AFTER_THE_OUTAGE))
def test_a_failure_report_redis_never_answered_is_sent_again_at_the_next_heartbeat_and_counts_once(
    redis_client: redis.Redis, redis_url: str, lands: bool, lapses: bool
) -> None:
    """``release.lua`` answers a repeat of a taken failure DUPLICATE (``P:failed``), so the kept report
    tells how the lease ended, as a completion's does; the item spends one attempt either way. Before:
    ``lost`` at once, landed or not (a landed failure and a lapse left the same record)."""
    ttl_ms = 300 if lapses else 60_000
    publish(Delivery.from_url(redis_url), "s", {"w0": [item("a", 0, 10)]}, lease_ttl_ms=ttl_ms)
    delivery, session = unanswered_session(redis_url, lands)

    async def run() -> list[Any]:
        await claim_fail_unanswered(session, delivery)
        unanswered = [len(session.holdings), len(session.resends), ends_of(session.stats)]
        return [*unanswered, await _beat_once_redis_is_back(session, delivery, lapses)]

    assert asyncio.run(run()) == [0, 1, {}, 0]
    assert (session.stats.claimed, ends_of(session.stats)) == (1, FAILURE_AFTER_THE_OUTAGE[(lands, lapses)])
    (again,) = delivery.claim("s", "w0", 1)
    assert again.attempt == 2  # one attempt spent: by the failure, or by the lapse


def test_a_failure_report_still_unanswered_at_shutdown_counts_lost(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """``settle``: Redis still down at the drain's last try, the lease is left to lapse, ``lost``."""
    publish(Delivery.from_url(redis_url), "s", {"w0": [item("a", 0, 10)]})
    delivery, session = unanswered_session(redis_url, lands=True)

    async def run() -> None:
        await claim_fail_unanswered(session, delivery)
        delivery.out.set()  # still unanswered at the drain's last try
        await session.resends.settle(5.0)

    asyncio.run(run())
    assert (ends_of(session.stats), len(session.resends)) == ({"lost": 1}, 0)


async def _engine(request: httpx.Request) -> httpx.Response:
    """An engine that answers every item at once."""
    if request.url.path == "/v1/models":
        return httpx.Response(200, json={"data": [{"id": "m", "max_model_len": 32768}]})
    if request.url.path == "/health":
        return httpx.Response(200)
    choice = {"index": 0, "text": "ok", "finish_reason": "stop"}
    return httpx.Response(200, json={"choices": [choice], "usage": {"completion_tokens": 5}})


@pytest.mark.parametrize(("answers", "ended"), [(False, {"lost": 1}), (True, {"duplicate": 1})])
def test_the_push_sidecar_ends_a_lease_whose_completion_went_unanswered_once_by_its_exit(
    redis_client: redis.Redis, redis_url: str, answers: bool, ended: dict[str, int]
) -> None:
    """The runner's counters at exit (those it prints) balance: its drain gives each kept completion
    its last try, Redis answering again by then or not. Heartbeats far apart: the drain's try is the
    only one."""
    publish(Delivery.from_url(redis_url), "s", {"w0": [item("a", 0, 10)]})
    delivery = UnansweredReports(redis.Redis.from_url(redis_url), lands=True)
    delivery.out.set()
    settings = SessionSettings("w0", retry_for_s=0.0, heartbeat_interval_s=20.0)
    session = WorkerSession(delivery, Holdings(1), settings)
    http = httpx.AsyncClient(transport=httpx.MockTransport(_engine), base_url="http://engine")
    engine = EngineClient(EngineOptions("http://engine", probe_timeout_s=0.2), http)
    sidecar = Sidecar(session, engine, RunnerSettings(idle_poll_s=0.02, drain_timeout_s=0.5))

    def unanswered() -> bool:
        if len(session.resends) and answers:
            delivery.out.clear()
        return len(session.resends) == 1

    stats = run_until(sidecar, unanswered, 10)
    assert (stats.claimed, ends_of(stats)) == (1, ended)  # before: (1, {})
    assert tally(Delivery.from_url(redis_url), "s", {"a#0"}) == (0, 0)


def test_against_the_release_befores_failure_script_a_resent_failure_still_ends_its_lease_once(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """Mixed versions: with the ``release.lua`` before ``P:failed`` (from git), a landed failure's
    resend is answered STALE, as any repeat was: the lease ends once, ``stale``, never twice, and
    the item spent one attempt. (A sidecar loads its own scripts, so this pairing is the nearest a
    roll comes to it: the record is only ever read by the script that writes it.)"""
    publish(Delivery.from_url(redis_url), "s", {"w0": [item("a", 0, 10)]}, lease_ttl_ms=60_000)
    delivery, session = unanswered_session(redis_url, lands=True)
    delivery.scripts = old_delivery(redis.Redis.from_url(redis_url), PRE_FAILED).scripts

    async def run() -> None:
        await claim_fail_unanswered(session, delivery)
        await session.heartbeat()

    asyncio.run(run())
    assert (session.stats.claimed, ends_of(session.stats), len(session.resends)) == (1, {"stale": 1}, 0)
    (again,) = delivery.claim("s", "w0", 1)
    assert again.attempt == 2


async def _beat_once_redis_is_back(session: WorkerSession, delivery: UnansweredReports, lapses: bool) -> int:
    """After an outage of unanswered reports: the lease left to lapse unheartbeated and be reaped
    (``lapses``), then one heartbeat, which sends what was kept; what is kept after it."""
    while lapses and delivery.progress("s").running:
        delivery.reap("s")
        await asyncio.sleep(0.05)
    await session.heartbeat()
    return len(session.resends)

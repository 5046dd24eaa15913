"""A push sidecar's start hands back what an earlier process of its worker id held (``takeover``), at
once and without spending attempts, and never what a live sidecar with the same id holds; Redis down
at start only delays it. Real Redis, a fake engine in process."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import redis
from redis.exceptions import ClusterDownError, TryAgainError

from service.delivery.keys import PRESENCE_TTL_MS, sidecar_presence
from service.delivery.outcomes import ResetReport
from service.delivery.protocol import Delivery
from service.embedded import EmbeddedServer
from service.sidecar.engine_client import EngineClient, EngineOptions
from service.sidecar.holdings import Holdings
from service.sidecar.runner import RunnerSettings, Sidecar
from service.sidecar.session import SessionSettings, WorkerSession
from service.sidecar.takeover import Takeover, TakeoverReport
from tests.service.sidecar.procs import claimed_by_a_killed_sidecar, item, publish, run_until, tally

MODELS = {"data": [{"id": "m", "max_model_len": 32768}]}
LEASE_TTL_MS = 60_000  # nothing in these tests may wait for a lease to lapse


class HoldingEngine:
    """Answers like an engine; a generation waits until ``go`` is set (a long trajectory)."""

    def __init__(self, go: bool = True) -> None:
        self.go = asyncio.Event()
        if go:
            self.go.set()
        self.running = 0

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json=MODELS)
        if request.url.path == "/health":
            return httpx.Response(200)
        self.running += 1
        try:
            await self.go.wait()
        finally:
            self.running -= 1
        choice = {"index": 0, "text": "ok", "finish_reason": "stop"}
        return httpx.Response(200, json={"choices": [choice], "usage": {"completion_tokens": 5}})


def _sidecar(delivery: Delivery, engine: HoldingEngine) -> Sidecar:
    session = WorkerSession(delivery, Holdings(8), SessionSettings("w0"))
    http = httpx.AsyncClient(transport=httpx.MockTransport(engine), base_url="http://engine")
    client = EngineClient(EngineOptions("http://engine", probe_timeout_s=0.2), http)
    settings = RunnerSettings(idle_poll_s=0.02, engine_wait_s=0.05, redis_retry_s=0.05)
    return Sidecar(session, client, settings)


def test_a_restarted_sidecar_hands_back_its_killed_predecessors_leases_at_once_without_spending_attempts(
    redis_client: redis.Redis, redis_url: str
) -> None:
    delivery = Delivery.from_url(redis_url)
    items = [item(f"p{i}", 0, 10) for i in range(4)]
    publish(delivery, "crash", {"w0": items}, lease_ttl_ms=LEASE_TTL_MS)
    killed = claimed_by_a_killed_sidecar(delivery, "crash", "w0", 3)  # nothing heartbeats them now
    redis_client.set(sidecar_presence("w0"), "killed-instance", px=300)  # its presence, lapsing
    sidecar = _sidecar(delivery, HoldingEngine())
    started = time.monotonic()
    stats = run_until(sidecar, lambda: delivery.progress("crash").finished, timeout_s=20)
    assert delivery.progress("crash").finished
    # not a lease TTL (60 s): a presence TTL (0.3 s); the report below says how, whatever the load
    assert time.monotonic() - started < LEASE_TTL_MS / 1000 / 2
    assert sidecar.takeover.report == TakeoverReport(released=3)
    assert (stats.reset, stats.accepted) == (3, 4)
    results = delivery.read_results("crash")
    assert {r.key for r in results} >= {le.key for le in killed}
    assert {r.attempt for r in results} == {1}  # the killed process's attempts were refunded
    assert tally(delivery, "crash", {i.key for i in items}) == (0, 0)


def test_a_restarted_sidecar_says_how_the_wait_on_its_predecessor_ended_before_it_says_it_claims(
    redis_client: redis.Redis, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A predecessor that held nothing (its leases done, or lapsed and requeued during the wait):
    the wait's line was followed at once by "engine ready, claiming" while claims still waited on
    it, and nothing told how it ended."""
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "quiet", {"w0": [item("p", 0, 10)]}, lease_ttl_ms=LEASE_TTL_MS)
    # its presence, lapsing; 300 ms lapsed before a sidecar starting at load 38 first read it, so
    # there was nothing to wait on and no line to check (helper timedtests)
    redis_client.set(sidecar_presence("w0"), "killed-instance", px=2_000)
    sidecar = _sidecar(delivery, HoldingEngine())
    with caplog.at_level(logging.INFO, logger="service.sidecar"):
        run_until(sidecar, lambda: delivery.progress("quiet").finished, timeout_s=20)
    said = [r.getMessage() for r in caplog.records]
    parts = ("waiting to see if it still is", "is gone, holding no leases", "engine ready, claiming")
    assert all(any(part in message for message in said) for part in parts), said
    first = [next(i for i, message in enumerate(said) if part in message) for part in parts]
    assert first == sorted(first), said  # in that order
    assert sidecar.takeover.report == TakeoverReport()


async def _until(condition: Callable[[], bool], timeout_s: float) -> None:
    """Poll ``condition`` (blocking I/O: off the loop) until it holds or ``timeout_s`` passed."""
    deadline = time.monotonic() + timeout_s
    while not await asyncio.to_thread(condition) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)


def test_a_second_live_sidecar_with_the_same_worker_id_hands_back_nothing_and_both_say_so(
    redis_client: redis.Redis, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    items = [item(f"p{i}", 0, 10) for i in range(4)]
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "twins", {"w0": items}, lease_ttl_ms=LEASE_TTL_MS)
    engine = HoldingEngine(go=False)  # both sidecars' engine: every generation runs until go
    first = _sidecar(Delivery.from_url(redis_url), engine)
    started: list[Sidecar] = []  # the second, built (its process started) once the first holds all four

    async def main() -> None:
        stops = asyncio.Event(), asyncio.Event()
        running = [asyncio.create_task(first.run(stops[0]))]
        await _until(lambda: engine.running == 4, 10)
        started.append(_sidecar(Delivery.from_url(redis_url), engine))
        second = started[0]
        running.append(asyncio.create_task(second.run(stops[1])))
        await asyncio.wait_for(second.takeover.done.wait(), 15)
        await asyncio.sleep(PRESENCE_TTL_MS / 3000 + 0.3)  # the first's next presence write meets it
        assert delivery.progress("twins").running == engine.running == 4  # none handed back or stopped
        engine.go.set()
        await _until(lambda: delivery.progress("twins").finished, 10)
        for stop in stops:
            stop.set()
        await asyncio.gather(*running)

    with caplog.at_level(logging.ERROR, logger="service.sidecar"):
        asyncio.run(main())
    second = started[0]
    assert second.takeover.report == TakeoverReport(twin=first.takeover.instance)
    assert (first.session.stats.accepted, first.session.stats.lost, first.session.stats.stale) == (4, 0, 0)
    assert second.session.stats.reset == 0
    told = [r.getMessage() for r in caplog.records if "another live sidecar" in r.getMessage()]
    assert sorted(told) == sorted(
        f"another live sidecar (instance {s.takeover.instance}) runs as worker w0: two sidecars share its "
        "queue, and neither hands back the other's leases at start; give each its own --worker-id"
        for s in (first, second)
    )
    assert tally(delivery, "twins", {i.key for i in items}) == (0, 0)


def test_a_sidecar_started_while_redis_is_down_keeps_running_and_hands_back_once_it_answers(
    tmp_path: Path,
) -> None:
    server = EmbeddedServer(appendonly=True).start()
    try:
        delivery = Delivery.from_url(server.url)
        items = [item(f"p{i}", 0, 10) for i in range(4)]
        publish(delivery, "outage", {"w0": items}, lease_ttl_ms=LEASE_TTL_MS)
        claimed_by_a_killed_sidecar(delivery, "outage", "w0", 2)
        server.kill()  # the AOF keeps all of it (written before each reply)
        sidecar = _sidecar(Delivery.from_url(server.url), HoldingEngine())
        restart = threading.Timer(1.5, server.start)
        during: list[bool] = []

        def finished() -> bool:
            try:
                return delivery.progress("outage").finished
            except redis.ConnectionError:
                during.append(sidecar.takeover.done.is_set() or sidecar.session.stats.claimed > 0)
                return False

        restart.start()
        stats = run_until(sidecar, finished, timeout_s=30)
        restart.join()
        assert during  # it ran through the outage,
        assert not any(during)  # claiming nothing
        assert (stats.reset, stats.accepted) == (2, 4)
        assert {r.attempt for r in delivery.read_results("outage")} == {1}
        assert tally(delivery, "outage", {i.key for i in items}) == (0, 0)
    finally:
        server.stop()


def _taken_over_after_a_kill(delivery: Delivery) -> Takeover:
    """Schedules ``older`` and ``newer`` of 3 items each for w0, 2 of each claimed by a killed sidecar;
    its successor's takeover, run until it is done."""
    for sid in ("older", "newer"):
        publish(
            delivery, sid, {"w0": [item(f"{sid}{i}", 0, 10) for i in range(3)]}, lease_ttl_ms=LEASE_TTL_MS
        )
        claimed_by_a_killed_sidecar(delivery, sid, "w0", 2)
    takeover = Takeover(WorkerSession(delivery, Holdings(8), SessionSettings("w0")), retry_s=0.01)

    async def start() -> None:
        marking = asyncio.create_task(takeover.run(asyncio.Event()))
        await asyncio.wait_for(takeover.done.wait(), 10)
        marking.cancel()

    asyncio.run(start())
    return takeover


class CutReset(Delivery):
    """Real Redis, but the reset of the second schedule fails once on the connection: before it ran
    (Redis restarting in the middle of the takeover's walk) or, with ``ran_first``, after it ran (its
    reply lost between running the script and answering; redis-py re-sends such a call too)."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        super().__init__(client, prefix)
        self.calls: list[str] = []
        self.ran_first = False
        self.error: Exception = redis.ConnectionError("connection reset by peer")

    def reset(
        self,
        schedule_id: str,
        worker_id: str,
        age_ms: int,
        now_ms: int | None = None,
        call_id: str | None = None,
    ) -> ResetReport:
        self.calls.append(schedule_id)
        ran = super().reset(schedule_id, worker_id, age_ms, now_ms, call_id) if self.ran_first else None
        if len(self.calls) == 2:
            raise self.error
        return ran if ran is not None else super().reset(schedule_id, worker_id, age_ms, now_ms, call_id)


@pytest.mark.parametrize("ran_first", [False, True], ids=["cut-before-running", "reply-lost-after-running"])
def test_a_takeover_cut_short_by_redis_is_retried_and_counts_every_lease_handed_back_once(
    redis_client: redis.Redis, redis_url: str, ran_first: bool
) -> None:
    """The walk goes round again where unanswered ("older" answered: not asked again). A reset whose
    reply was lost after it ran had handed its leases back already: its retry (same call id) answers
    the first run's report, so those leases are counted once, not twice nor lost from the count."""
    delivery = CutReset.from_url(redis_url)
    assert isinstance(delivery, CutReset)
    delivery.ran_first = ran_first
    takeover = _taken_over_after_a_kill(delivery)
    assert delivery.calls == ["older", "newer", "newer"]
    assert takeover.report == TakeoverReport(released=4)
    assert takeover.session.stats.reset == 4
    for sid in ("older", "newer"):
        assert (delivery.progress(sid).queued, delivery.progress(sid).running) == (3, 0)


@pytest.mark.parametrize(
    "error",
    [
        ClusterDownError("CLUSTERDOWN The cluster is down"),
        TryAgainError("TRYAGAIN Multiple keys request during rehashing of slot"),
    ],
    ids=["clusterdown", "tryagain"],
)
def test_a_takeover_that_meets_a_cluster_slot_not_served_now_is_retried_not_skipped_as_damaged(
    redis_client: redis.Redis, redis_url: str, error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    """A Redis Cluster's CLUSTERDOWN (a master failing over) or TRYAGAIN (mid-reshard) is a
    ``ResponseError``: the walk took it for a schedule damaged in Redis, logged an error and skipped
    it, and the killed predecessor's leases there were left to lapse, an attempt spent each. It says
    nothing of the schedule's keys: the walk is tried again there, as through an outage."""
    delivery = CutReset.from_url(redis_url)
    assert isinstance(delivery, CutReset)
    delivery.error = error
    with caplog.at_level(logging.ERROR, logger="service.sidecar"):
        takeover = _taken_over_after_a_kill(delivery)
    assert delivery.calls == ["older", "newer", "newer"]
    assert (takeover.report, takeover.session.stats.reset) == (TakeoverReport(released=4), 4)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


@pytest.mark.parametrize("px", [PRESENCE_TTL_MS * 10, None], ids=["longer TTL", "no TTL"])
def test_a_presence_key_living_past_the_presence_ttl_is_waited_on_for_at_most_that_ttl(
    redis_client: redis.Redis, redis_url: str, px: int | None
) -> None:
    """A presence key written with a longer time-to-live (another release's) or none (set by hand)
    still costs a starting sidecar at most ``PRESENCE_TTL_MS`` before it reads the key again: a
    twin rewrites it within that, a dead process's key is not waited out for its whole TTL."""
    delivery = Delivery.from_url(redis_url)
    redis_client.set(sidecar_presence("w0"), "other-instance", px=px)
    takeover = Takeover(WorkerSession(delivery, Holdings(8), SessionSettings("w0")))
    assert takeover._present() == ("other-instance", PRESENCE_TTL_MS)
    redis_client.set(sidecar_presence("w0"), "other-instance", px=PRESENCE_TTL_MS // 2)
    holder, ttl_ms = takeover._present()
    assert holder == "other-instance"
    assert 0 < ttl_ms <= PRESENCE_TTL_MS // 2
    redis_client.set(sidecar_presence("w0"), takeover.instance, px=PRESENCE_TTL_MS)
    assert takeover._present() == (None, 0)  # its own key: nothing to wait on

"""A Redis older than 7 is refused at start, in one line naming the version found and the one needed.

The actuals log reads XINFO STREAM entries-added (Redis 7.0): on an older server the service used to
start, then fail on the first reported actual with an error naming neither the version nor the fix.
The check reads the real server's ``INFO server``; an old server is a made-up reply, or the real one
against a minimum raised above it (the code path is the same: nothing of Redis is mocked).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient

from service import redis_conn
from service.app import create_app
from service.client import SchedulerAPIError
from service.delivery import Delivery
from service.delivery.reaper import DEFAULT_INTERVAL_S
from service.embedded import EmbeddedServer
from service.redis_conn import version_refusal
from service.settings import Settings
from tests.service.api_helpers import AppFactory, actual_history, batch_body
from tests.service.delivery.conftest import schedule

NEEDED = "Redis 7.0 or later, or Valkey"
RAISED = "Redis 99.0 or later, or Valkey"  # what the tests below raise the minimum to


def test_the_embedded_valkey_is_new_enough(redis_client: redis.Redis) -> None:
    assert version_refusal(redis_client.info("server"), "here") is None


def test_a_redis_6_reply_is_refused_naming_the_version_found_and_the_one_needed(
    redis_client: redis.Redis,
) -> None:
    older = {**redis_client.info("server"), "redis_version": "6.2.14", "server_name": "redis"}
    refusal = version_refusal(older, "redis://cache:6379/0")
    assert refusal == f"Redis 6.2.14 at redis://cache:6379/0 is too old: the service needs {NEEDED}"


def test_a_reply_without_a_version_is_refused_too(redis_client: redis.Redis) -> None:
    info = {k: v for k, v in redis_client.info("server").items() if k != "redis_version"}
    assert (version_refusal(info, "x") or "").startswith("Redis (no redis_version in INFO) at x is too old")


def test_the_app_on_the_real_server_starts_ready_having_checked_its_version(make_client: AppFactory) -> None:
    client = make_client()
    assert client.get("/readyz").json()["redis"] == "ok"
    assert client.app.state.context.redis_version.done  # type: ignore[attr-defined]


def test_a_server_below_the_minimum_keeps_the_app_not_ready_with_one_error_line(
    make_client: AppFactory, redis_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(redis_conn, "MIN_REDIS_VERSION", (99, 0))  # the real 7.2.4 is "too old"
    with caplog.at_level(logging.ERROR, logger="service.redis"):
        client = make_client()
        ready = client.get("/readyz")
        planned = client.post("/schedule", json=batch_body())
    refusal = f"Redis 7.2.4 at {redis_url} is too old: the service needs {RAISED}"
    assert (ready.status_code, ready.json()["redis"]) == (503, f"refused: {refusal}")
    assert planned.status_code == 503
    assert refusal in planned.json()["detail"]
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == [refusal]


def test_a_server_down_at_start_is_checked_by_the_first_readyz_that_reaches_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _too_old_and_down_at_start(tmp_path, monkeypatch) as (server, client):
        assert client.get("/readyz").json()["redis"].startswith("unreachable")
        server.start()
        ready = client.get("/readyz")
        refusal = f"refused: Redis 7.2.4 at {server.url} is too old: the service needs {RAISED}"
        assert (ready.status_code, ready.json()["redis"]) == (503, refusal)


def test_every_route_refuses_a_server_found_too_old_after_start_with_the_version_and_stores_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis down at start, back too old: only ``/readyz`` refused it, while ``POST /schedule`` and
    ``/actuals`` ran their scripts on it (published, stored; on a real Redis 6 a Lua or XINFO error)."""
    with _too_old_and_down_at_start(tmp_path, monkeypatch) as (server, client):
        server.start()
        refusal = f"Redis 7.2.4 at {server.url} is too old: the service needs {RAISED}"
        answers = [
            client.post("/schedule", json=batch_body()),
            client.post("/actuals", json={"actuals": actual_history(steps=1)}),
            client.get("/models"),
            client.post("/models/retrain"),
            client.get("/schedule/any-step"),
        ]
        for answer in answers:
            assert answer.status_code == 503, answer.text
            assert answer.json()["type"].endswith("/redis-too-old")
            assert refusal in answer.json()["detail"]
        assert client.get("/readyz").json()["redis"] == f"refused: {refusal}"
        assert redis.Redis.from_url(server.url).dbsize() == 0


def test_a_server_refused_at_start_is_named_by_every_route_as_too_old(
    make_client: AppFactory, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redis_conn, "MIN_REDIS_VERSION", (99, 0))
    client = make_client()
    for answer in (client.post("/actuals", json={"actuals": actual_history(steps=1)}), client.get("/models")):
        assert answer.status_code == 503
        assert answer.json()["type"].endswith("/redis-too-old")
        assert answer.json()["detail"].startswith(f"Redis 7.2.4 at {redis_url} is too old")


def test_the_client_does_not_retry_a_redis_too_old(
    make_client: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only an upgrade and a restart fix it: retried as an outage, every call waited out
    ``outage_s`` (60 s) before saying so."""
    monkeypatch.setattr(redis_conn, "MIN_REDIS_VERSION", (99, 0))
    answer = make_client().get("/models")
    error = SchedulerAPIError(answer.status_code, answer.json())
    assert error.status == 503
    assert not error.retryable


class _SlowInfo:
    """A client whose ``INFO`` answers after a pause, as a loaded server's does."""

    def __init__(self, client: redis.Redis, pause_s: float = 0.2) -> None:
        self.client = client
        self.pause_s = pause_s

    def info(self, section: str) -> dict[str, object]:
        time.sleep(self.pause_s)
        return dict(self.client.info(section))


def test_requests_that_reach_a_too_old_server_together_log_its_refusal_once(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Every route checks the version now (requests run on many threads): each request that found
    it unchecked asked and logged the refusal again."""
    monkeypatch.setattr(redis_conn, "MIN_REDIS_VERSION", (99, 0))
    version = redis_conn.VersionCheck(_SlowInfo(redis_client), "here")  # type: ignore[arg-type]
    with caplog.at_level(logging.ERROR, logger="service.redis"):
        threads = [threading.Thread(target=version.check) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert len([r for r in caplog.records if "too old" in r.getMessage()]) == 1


def test_a_request_behind_a_version_check_that_hangs_meets_redis_itself_within_a_second(
    redis_client: redis.Redis,
) -> None:
    """Behind a server that accepts and does not answer, requests queued for the check one after
    another, each then waiting out its own timeouts."""
    pause_s = 3.0
    version = redis_conn.VersionCheck(_SlowInfo(redis_client, pause_s=pause_s), "here")  # type: ignore[arg-type]
    first = threading.Thread(target=version.check)
    first.start()
    time.sleep(0.1)
    started = time.monotonic()
    with pytest.raises(redis.TimeoutError):
        version.check()
    # VERSION_WAIT_S (1 s) and the request's own timeout, not the first check's pause: any bound below
    # the pause tells them apart (VERSION_WAIT_S + 0.5 s was a speed a loaded host could miss)
    assert time.monotonic() - started < pause_s
    first.join()


class _CountedInfo:
    """A client that counts its ``INFO`` calls (each a round trip to the server)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.asked = 0

    def info(self, section: str) -> dict[str, object]:
        self.asked += 1
        return dict(self.client.info(section))


def test_requests_waiting_behind_a_version_check_that_fails_take_its_failure_as_their_answer() -> None:
    """Behind a frozen server (SIGSTOPped: it accepts, nothing answers) a request waiting for another's
    check asked the server again once that check failed: one more socket timeout, on a new connection.
    A push sidecar's exit closes its connections (``service/sidecar/hang_up.py``) to end such calls;
    the waiting check then opened a new one, and the exit waited out its socket timeout (5 s) past
    the promised drain."""
    server = EmbeddedServer().start()
    try:
        client = redis.Redis.from_url(server.url, socket_timeout=0.3, socket_connect_timeout=0.3)
        counted = _CountedInfo(client)
        version = redis_conn.VersionCheck(counted, server.url)  # type: ignore[arg-type]
        server.signal(signal.SIGSTOP)
        try:
            failures: list[Exception] = []
            first = threading.Thread(target=_check_into, args=(version, failures))
            first.start()
            time.sleep(0.05)  # the first check is out; this one waits for it (VERSION_WAIT_S, 1 s)
            with pytest.raises(redis.RedisError):
                version.check()
            first.join()
        finally:
            server.signal(signal.SIGCONT)
        assert [type(f) for f in failures] == [redis.TimeoutError]  # the first's own socket timeout
        assert counted.asked == 1
        assert not version.done
    finally:
        server.stop()


class _HeldInfo(_CountedInfo):
    """A ``_CountedInfo`` whose answers wait for the test to let them through."""

    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client)
        self.answer = threading.Event()

    def info(self, section: str) -> dict[str, object]:
        self.answer.wait(10)
        return super().info(section)


def test_requests_waiting_behind_a_version_check_that_succeeds_take_its_answer_unasked(
    redis_client: redis.Redis,
) -> None:
    """The other side of the failure above: a check that got the server's version answers the
    requests that waited for it, none of them refused nor asking the server again."""
    counted = _HeldInfo(redis_client)
    version = redis_conn.VersionCheck(counted, "here")  # type: ignore[arg-type]
    answers: list[str | None] = []
    failures: list[Exception] = []

    def check() -> None:
        try:
            answers.append(version.check())
        except redis.RedisError as failure:
            failures.append(failure)

    threads = [threading.Thread(target=check) for _ in range(3)]
    for thread in threads:
        thread.start()
    time.sleep(0.1)  # one check is out, the others wait for it (VERSION_WAIT_S, 1 s)
    counted.answer.set()
    for thread in threads:
        thread.join()
    assert failures == []
    assert answers == [None, None, None]
    assert counted.asked == 1
    assert version.done


def _check_into(version: redis_conn.VersionCheck, failures: list[Exception]) -> None:
    try:
        version.check()
    except redis.RedisError as failure:
        failures.append(failure)


@contextmanager
def _too_old_and_down_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[EmbeddedServer, TestClient]]:
    """An app started while its Redis is down, that Redis (stopped, for the test to start) below the
    minimum version the service is made to need."""
    monkeypatch.setattr(redis_conn, "MIN_REDIS_VERSION", (99, 0))
    server = EmbeddedServer().start()
    try:
        server.kill()
        settings = Settings(redis_url=server.url, model_dir=str(tmp_path), redis_timeout_s=0.5)
        with TestClient(create_app(settings), raise_server_exceptions=False) as client:
            yield server, client
    finally:
        server.stop()


def test_the_reaper_does_not_reap_on_a_server_found_too_old_after_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis down at start, back too old: every route refused it, while the app's reaper ran its
    script on it every second, taking back the leases of whatever another process had published."""
    with _too_old_and_down_at_start(tmp_path, monkeypatch) as (server, client):
        server.start()
        delivery = Delivery(redis.Redis.from_url(server.url, decode_responses=True))
        delivery.publish(schedule("s", {"a": 1}, ttl_ms=50))
        assert len(delivery.claim("s", "a", 1)) == 1
        assert client.get("/readyz").status_code == 503  # the app knows the server is too old
        time.sleep(3 * DEFAULT_INTERVAL_S)  # the lease lapsed long ago: a reaper pass would requeue it
        progress = delivery.progress("s")
        assert (progress.queued, progress.running) == (0, 1)
        delivery.client.close()

"""Redis unreachable: 503 with a clear message; the service recovers by itself when Redis returns."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import redis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from redis.backoff import NoBackoff
from redis.retry import Retry

from service import redis_conn
from service.app import create_app
from service.embedded import EmbeddedServer
from service.problems.table import lookup
from service.settings import Settings
from tests.service.api.badinput import redis_snapshot
from tests.service.api_helpers import LiveServer, batch_body


@pytest.fixture
def private_redis() -> Iterator[EmbeddedServer]:
    server = EmbeddedServer(appendonly=True).start()
    yield server
    server.stop()


@contextmanager
def _full_redis(server: EmbeddedServer, tmp_path: Path) -> Iterator[tuple[TestClient, redis.Redis]]:
    """A client of the app on ``server`` that scheduled once, then Redis out of memory: every write
    refused (``maxmemory`` 1, nothing evicted) until the block ends, its memory back before the client
    closes. (client, the admin client that filled it)."""
    settings = Settings(redis_url=server.url, model_dir=str(tmp_path), redis_timeout_s=0.5)
    admin = redis.Redis.from_url(server.url)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        assert client.post("/schedule", json=batch_body()).status_code == 200
        admin.config_set("maxmemory-policy", "noeviction")
        admin.config_set("maxmemory", 1)  # every write is now refused
        yield client, admin
        admin.config_set("maxmemory", 0)
    admin.close()


def test_redis_down_is_a_503_and_the_service_recovers_when_it_returns(
    private_redis: EmbeddedServer, tmp_path: Path
) -> None:
    settings = Settings(redis_url=private_redis.url, model_dir=str(tmp_path), redis_timeout_s=0.5)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        first = client.post("/schedule", json=batch_body())
        assert first.status_code == 200

        private_redis.kill()
        down = client.post("/schedule", json=batch_body())
        assert down.status_code == 503
        assert down.headers["content-type"] == "application/problem+json"
        assert "Redis is unreachable" in down.json()["detail"]
        assert down.headers["retry-after"] == "1"
        assert client.get(f"/schedule/{first.json()['schedule_id']}").status_code == 503
        ready = client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["redis"].startswith("unreachable")
        assert client.get("/healthz").status_code == 200  # alive: do not restart, just wait
        scraped = client.get("/metrics")  # the outage is seen on the dashboard, not only in logs
        assert scraped.status_code == 200
        assert 'rollout_http_requests_total{method="POST",route="/schedule",status="503"} 1.0' in scraped.text

        private_redis.start()  # same port and data dir: the AOF replays the first schedule
        assert client.get("/readyz").status_code == 200
        again = client.post("/schedule", json=batch_body())
        assert again.status_code == 200
        progress = client.get(f"/schedule/{first.json()['schedule_id']}")
        assert progress.status_code == 200
        assert progress.json()["total"] == 32


def test_the_app_starts_while_redis_is_down_and_serves_once_it_is_up(
    private_redis: EmbeddedServer, tmp_path: Path
) -> None:
    private_redis.kill()
    settings = Settings(redis_url=private_redis.url, model_dir=str(tmp_path), redis_timeout_s=0.5)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        assert client.get("/readyz").status_code == 503
        assert client.post("/schedule", json=batch_body()).status_code == 503
        private_redis.start()
        assert client.post("/schedule", json=batch_body()).status_code == 200


def test_redis_out_of_memory_is_a_503_that_stores_nothing_and_passes_when_memory_returns(
    private_redis: EmbeddedServer, tmp_path: Path
) -> None:
    with _full_redis(private_redis, tmp_path) as (client, admin):
        keys = sorted(admin.keys("*"))
        full = client.post("/schedule", json=batch_body())
        assert full.status_code == 503
        assert full.json()["type"].endswith("/redis-out-of-memory")
        assert "out of memory" in full.json()["detail"]
        assert full.headers["retry-after"] == "1"
        assert sorted(admin.keys("*")) == keys  # the refused request left nothing behind
        admin.config_set("maxmemory", 0)  # memory returns
        assert client.post("/schedule", json=batch_body()).status_code == 200


def test_a_transaction_discarded_for_memory_is_answered_like_any_out_of_memory_write() -> None:
    """An OOM at EXEC (a queued command refused) surfaces as ExecAbortError, not OutOfMemoryError."""
    discarded = redis.exceptions.ExecAbortError("Transaction discarded because of: OOM command not allowed")
    assert (lookup(discarded).status, lookup(discarded).slug) == (503, "redis-out-of-memory")


def test_healthz_answers_while_every_worker_thread_is_taken(client: TestClient) -> None:
    """A stalled Redis holds the sync routes' threads for their whole timeouts; liveness must not wait."""
    limiter = client.portal.call(anyio.to_thread.current_default_thread_limiter)  # type: ignore[union-attr]
    holders = [object() for _ in range(int(limiter.total_tokens))]
    for holder in holders:
        client.portal.call(limiter.acquire_on_behalf_of, holder)  # type: ignore[union-attr]
    answers: list[int] = []
    probe = threading.Thread(target=lambda: answers.append(client.get("/healthz").status_code), daemon=True)
    try:
        probe.start()
        probe.join(timeout=5)
        assert answers == [200], "liveness queued behind the blocked worker threads"
    finally:
        for holder in holders:
            client.portal.call(limiter.release_on_behalf_of, holder)  # type: ignore[union-attr]


@pytest.fixture
def silent_redis() -> Iterator[str]:
    """The URL of a server that takes connections (the kernel's backlog) and never answers one."""
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(512)
    yield f"redis://127.0.0.1:{hole.getsockname()[1]}/0"
    hole.close()


NO_RETRY = Retry(NoBackoff(), 0)
POLLERS = 16  # results polls in flight at once
VERSION_HOLD_S = 60.0  # how long the version check's client waits on the silent server


def test_healthz_answers_at_once_while_trainers_poll_results_of_a_redis_silent_since_start(
    silent_redis: str, tmp_path: Path
) -> None:
    """Until Redis first answers, every route asks its version (``context_of``); a results poll asked on
    the event loop held liveness for seconds each, and polling trainers failed the probe.

    Checked by what liveness waits for, not by its speed (it was ``< 0.5 s``, which a loaded host
    broke): the version check's client waits ``VERSION_HOLD_S`` on the silent server, so a check on
    the event loop holds it that long, and one queued behind another's (the reaper's, each second)
    holds it ``VERSION_WAIT_S``, per poll: ``POLLERS`` polls in line on the loop hold it at least
    ``POLLERS * VERSION_WAIT_S`` (16 s). ``/healthz`` must answer within a third of that, ten times
    the 0.5 s bound that 24 busy processes on 2 cores overran."""
    settings = Settings(redis_url=silent_redis, model_dir=str(tmp_path), redis_timeout_s=0.1)
    # one client for the polling trainers, not one each: a client builds a TLS context (~34 ms of CPU)
    with (
        LiveServer(settings) as live,
        httpx.Client(base_url=live.url, timeout=2 * VERSION_HOLD_S) as trainers,
    ):
        app = live.server.config.app
        assert isinstance(app, FastAPI)
        version: redis_conn.VersionCheck = app.state.context.redis_version
        version.client = redis.Redis.from_url(silent_redis, socket_timeout=VERSION_HOLD_S, retry=NO_RETRY)

        def poll() -> None:  # each on a connection of its own: none is idle while the polls wait
            assert trainers.get("/schedule/s1/results").status_code == 503

        pollers = [threading.Thread(target=poll) for _ in range(POLLERS)]
        for poller in pollers:
            poller.start()
        time.sleep(0.3)  # the polls are in (were they not yet, this would only check less)
        liveness_s = POLLERS * redis_conn.VERSION_WAIT_S / 3
        try:
            with httpx.Client(base_url=live.url, timeout=liveness_s) as kubelet:
                status = kubelet.get("/healthz").status_code
        except httpx.TimeoutException:
            pytest.fail(
                f"/healthz did not answer in {liveness_s}s: it waited behind the polls' version checks"
            )
        finally:
            version.client.close()
        for poller in pollers:
            poller.join(2 * VERSION_HOLD_S)
    assert status == 200


STATED = {"workers": [{"worker_id": "w0", "device": "H100", "time_scale": 1.0}]}  # no learned speed read
REFUSED_BODIES = [  # each fault found by another stage of the checks: the route's, the planner's
    ({"policy": "no-such-policy"}, 422, "policy"),
    ({"n": 64}, 413, "batch.items"),
    (
        {
            "inventory": STATED,
            "batch": {
                "items": [{"prompt_id": "p", "prompt_tokens": 9, "max_new_tokens": 9, "pinned_worker": "w9"}]
            },
        },
        422,
        "batch.items[0].pinned_worker",
    ),
]


@pytest.mark.parametrize(("fault", "status", "field"), REFUSED_BODIES, ids=["policy", "count", "pin"])
def test_a_bad_body_under_a_chosen_id_is_refused_for_what_it_is_while_redis_is_down(
    private_redis: EmbeddedServer, tmp_path: Path, fault: dict[str, Any], status: int, field: str
) -> None:
    """The in-flight mark, written on arrival, fails with Redis down; the body is still checked, so an
    invalid one hears which field is wrong (it answered the mark's 503, then its 422 once Redis was back),
    and a valid one the 503, which no retry makes a 422."""
    settings = Settings(
        redis_url=private_redis.url, model_dir=str(tmp_path), redis_timeout_s=0.5, max_trajectories=256
    )
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        private_redis.kill()
        refused = client.post("/schedule", json=batch_body(schedule_id="step", **fault))
        valid = client.post("/schedule", json=batch_body(schedule_id="step"))
        private_redis.start()
        again = client.post("/schedule", json=batch_body(schedule_id="step", **fault))
    assert (refused.status_code, refused.json()["field"]) == (status, field)
    assert (again.status_code, again.json()["field"]) == (status, field)
    assert valid.status_code == 503
    assert "Redis is unreachable" in valid.json()["detail"]


def test_a_bad_body_under_a_chosen_id_is_refused_for_what_it_is_and_writes_nothing_when_redis_is_full(
    private_redis: EmbeddedServer, tmp_path: Path
) -> None:
    """Out of memory, the mark's write is refused: a bad body is still a 422 naming its field, a valid
    one the mark's 503 ``redis-out-of-memory``; neither leaves a key behind."""
    with _full_redis(private_redis, tmp_path) as (client, admin):
        before = redis_snapshot(admin)
        refused = client.post("/schedule", json=batch_body(schedule_id="step", policy="no-such-policy"))
        full = client.post("/schedule", json=batch_body(schedule_id="step"))
        after = redis_snapshot(admin)
    assert (refused.status_code, refused.json()["field"]) == (422, "policy")
    assert (full.status_code, full.json()["type"].rsplit("/", 1)[1]) == (503, "redis-out-of-memory")
    assert after == before


PLANNER_ONLY_FAULTS = [  # each body passes every check but the planner's own, which need no lengths
    ({"pinned_worker": "w9"}, "batch.items[0].pinned_worker"),  # a worker the inventory lacks
    ({"max_new_tokens": 4_000_000}, "batch.items[0].max_new_tokens"),  # no worker's KV cache holds it
]


@pytest.mark.parametrize("schedule_id", ["step", None], ids=["chosen-id", "drawn-id"])
@pytest.mark.parametrize(("fault", "field"), PLANNER_ONLY_FAULTS, ids=["pin", "cap"])
def test_a_body_only_the_planner_refuses_is_a_422_while_redis_is_down_though_its_speeds_are_learned(
    private_redis: EmbeddedServer, tmp_path: Path, fault: dict[str, Any], field: str, schedule_id: str | None
) -> None:
    """Its workers state no speed, so it is planned by speeds learned in Redis, and any request reads
    Redis before it plans (the speeds, the actuals its predictions fold in): the planner's rules are
    checked on the profiles' inventory when Redis refuses it, so it is the 422 it is after the outage,
    not a 503 a retry turns into that 422. A valid body is still the 503."""
    settings = Settings(redis_url=private_redis.url, model_dir=str(tmp_path), redis_timeout_s=0.5)
    body = batch_body(prompts=1, n=1, schedule_id=schedule_id)
    body["batch"]["items"][0].update(fault)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        private_redis.kill()
        refused = client.post("/schedule", json=body)
        valid = client.post("/schedule", json=batch_body(schedule_id=schedule_id))
        private_redis.start()
        again = client.post("/schedule", json=body)
    assert all(w.keys() == {"worker_id", "device", "max_num_seqs"} for w in body["inventory"]["workers"])
    assert (again.status_code, again.json()["field"]) == (422, field)
    assert (refused.status_code, refused.json()["field"]) == (422, field)
    assert (valid.status_code, valid.json()["type"].rsplit("/", 1)[1]) == (503, "redis-unavailable")

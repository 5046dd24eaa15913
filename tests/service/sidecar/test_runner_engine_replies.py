"""The push-mode sidecar in process against what its engine answers (real Redis; engine-sim on
loopback, or nothing listening, or a fake vLLM): it says once that the engine is ready, claims nothing
while it is down and hands back what it claimed but never started, pauses on an engine that aborts
every request, and fails an item the engine refuses or that cannot even be sent. Split from
test_runner.py at its size limit (edges64); an engine that freezes or fails one item while healthy is
test_runner_engine_faults.py's."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import redis

from service.delivery.protocol import Delivery
from service.delivery.records import DeliveryItem
from service.sidecar.engine_client import EngineClient, EngineOptions
from service.sidecar.holdings import Holdings
from service.sidecar.runner import RunnerSettings, Sidecar
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.procs import item, publish, run_until
from tests.service.sidecar.push_runner import push_sidecar


def _finished(delivery: Delivery, sid: str) -> Callable[[], bool]:
    return lambda: delivery.progress(sid).finished


def test_an_item_the_engine_refuses_is_failed_and_dead_lettered_after_its_attempts(
    redis_client: redis.Redis, redis_url: str, engine_url: str
) -> None:
    delivery = Delivery.from_url(redis_url)
    poison = DeliveryItem(
        "bad#0", "bad", 0, 40_000, 100, 100.0, {"prompt": "x"}
    )  # a prompt past max_model_len
    publish(delivery, "poison", {"w0": [poison, item("ok", 0, 50)]})
    stats = run_until(push_sidecar(redis_url, engine_url), _finished(delivery, "poison"))
    progress = delivery.progress("poison")
    assert (progress.done, progress.failed, stats.failed) == (1, 1, 5)
    assert "maximum context length" in progress.dead_letters[0].reason


def _httpx_027_encode_json(body: Any) -> tuple[dict[str, str], httpx.ByteStream]:
    """How httpx up to 0.27 encoded ``json=``: ASCII-escaped, so a lone surrogate went out as
    ``\\ud800`` (0.28 on raises ``UnicodeEncodeError``; the declared floor is 0.27)."""
    data = json.dumps(body).encode()
    return {"Content-Length": str(len(data)), "Content-Type": "application/json"}, httpx.ByteStream(data)


@pytest.mark.parametrize("httpx_json", ["installed", "httpx 0.27"])
def test_an_item_the_sidecar_cannot_even_send_is_failed_not_left_running_forever(
    httpx_json: str,
    redis_client: redis.Redis,
    redis_url: str,
    engine_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a lone surrogate cannot be encoded as UTF-8: the request never leaves, and before the fix the
    # task died while the heartbeat kept its lease alive; the sidecar encodes its bodies itself, so
    # that holds whatever httpx is installed (0.27 sent the item to the engine, and it was done)
    if httpx_json == "httpx 0.27":
        monkeypatch.setattr(httpx._content, "encode_json", _httpx_027_encode_json)
    delivery = Delivery.from_url(redis_url)
    unsendable = DeliveryItem("bad#0", "bad", 0, 100, 100, 100.0, {"prompt": "x\ud800y"})
    publish(delivery, "unsendable", {"w0": [unsendable, item("ok", 0, 50)]})
    run_until(push_sidecar(redis_url, engine_url), _finished(delivery, "unsendable"), timeout_s=10)
    progress = delivery.progress("unsendable")
    assert (progress.done, progress.failed) == (1, 1)
    assert "'bad#0' is not UTF-8 in field payload.prompt" in progress.dead_letters[0].reason  # claims.py


def test_a_sidecar_says_once_that_its_engine_is_ready_and_which_model_it_requests(
    redis_client: redis.Redis, redis_url: str, engine_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A new user's only sign that a sidecar works: without it, a healthy start logged nothing."""
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "hello", {"w0": [item("p", 0, 10)]})
    with caplog.at_level(logging.INFO, logger="service.sidecar"):
        run_until(push_sidecar(redis_url, engine_url), _finished(delivery, "hello"))
    ready = [r.getMessage() for r in caplog.records if "engine ready" in r.getMessage()]
    model = httpx.get(f"{engine_url}/v1/models").json()["data"][0]["id"]
    assert ready == [f"engine ready, claiming: requesting model {model}"]


def test_a_sidecar_whose_engine_is_down_claims_nothing_and_says_so_once(
    redis_client: redis.Redis,
    redis_url: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Run until the sidecar's 10th probe of the engine has failed, counted: 0.5 s of the wall clock
    (~10 polls 50 ms apart) held no probe at all once on a loaded host, and no line (0 == 1)."""
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "down", {"w0": [item("p", 0, 10)]})
    sidecar = push_sidecar(redis_url, "http://127.0.0.1:9", engine_wait_s=0.05)
    probed: list[int] = []  # probes ended (each failed: nothing listens on port 9)
    ready = sidecar.engine.ready

    async def counted() -> str:
        try:
            return await ready()
        finally:
            probed.append(1)

    monkeypatch.setattr(sidecar.engine, "ready", counted)
    with caplog.at_level(logging.WARNING, logger="service.sidecar"):
        stats = run_until(sidecar, lambda: len(probed) >= 10)
    assert len(probed) >= 10
    assert stats.claimed == 0
    assert delivery.progress("down").queued == 1
    assert sum("engine not ready" in r.getMessage() for r in caplog.records) == 1


def test_leases_claimed_but_not_started_go_back_while_the_engine_is_down(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """A claim in flight when the engine died: heartbeats would keep those leases out of every
    thief's and reaper's reach for as long as the engine stays down."""
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "unstarted", {"w0": [item("p", 0, 10), item("q", 0, 10)]}, lease_ttl_ms=30_000)
    sidecar = push_sidecar(redis_url, "http://127.0.0.1:9", engine_wait_s=0.05)
    assert len(asyncio.run(sidecar.session.claim(2))) == 2  # held, never started
    seen_queued: list[int] = []

    def back_in_the_queue() -> bool:  # while it runs, not at the drain that stopping it triggers
        seen_queued.append(delivery.progress("unstarted").queued)
        return seen_queued[-1] == 2

    run_until(sidecar, back_in_the_queue, timeout_s=3.0)
    assert seen_queued[-1] == 2


def test_an_engine_that_aborts_requests_is_given_a_pause_not_a_tight_retry_loop(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """vLLM paused for a weight sync aborts what it runs and still lists its models."""
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "paused", {"w0": [item("p", 0, 10)]}, lease_ttl_ms=30_000)
    generations: list[float] = []

    def paused_vllm(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "m", "max_model_len": 32768}]})
        if request.url.path == "/health":
            return httpx.Response(200)
        generations.append(time.monotonic())
        choice = {"index": 0, "text": "", "finish_reason": "abort"}
        return httpx.Response(200, json={"choices": [choice], "usage": {"completion_tokens": 3}})

    session = WorkerSession(Delivery.from_url(redis_url), Holdings(8), SessionSettings("w0"))
    http = httpx.AsyncClient(transport=httpx.MockTransport(paused_vllm), base_url="http://engine")
    engine = EngineClient(EngineOptions("http://engine", synthetic_prompts=True), http)
    settings = RunnerSettings(idle_poll_s=0.02, engine_wait_s=0.25)
    started = time.monotonic()
    stats = run_until(Sidecar(session, engine, settings), lambda: time.monotonic() - started > 1.0)
    assert 2 <= len(generations) <= 6  # about one try per engine_wait_s, not hundreds
    assert stats.failed == 0  # an abort never costs the item an attempt
    assert delivery.progress("paused").done == 0

"""What a sidecar's log tells an operator on call: whose line it is, and one line per fault, not one
per retry."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import time
from pathlib import Path

import pytest

from service import logs
from service.delivery.protocol import Delivery
from service.embedded import EmbeddedServer
from service.sidecar.engine_client import EngineClient, EngineOptions
from service.sidecar.holdings import Holdings
from service.sidecar.runner import RunnerSettings, Sidecar
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.procs import cluster, item, publish, run_until, wait_until
from tests.service.sidecar.spies import first_generation


def test_a_redis_outage_is_one_warning_per_stuck_call_and_one_for_claiming_each_naming_its_schedule(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two items finish while Redis is down for ~3 s: each completion retries some six times, the
    claim loop twice a second and heartbeats three times, yet the log holds one line per completion,
    one for claiming and one for heartbeats. Redis is killed as the first item reaches the engine
    (``first_generation``), not at a poll of the engine's ``running`` count: a poll late on a loaded
    host missed the items' run altogether and killed nothing (``assert killed``). The run ends 3 s
    into the outage once each kind of line has come (a bound of 30 s, ``run_until``'s)."""
    logs.install_record_factory()
    server = EmbeddedServer().start()
    with cluster(tmp_path) as procs:
        engine = procs.engine_threads({"engine": 0.05})["engine"]
        try:
            publish(
                Delivery.from_url(server.url), "outage", {"w0": [item(f"p{i}", 0, 1000) for i in range(2)]}
            )
            session = WorkerSession(Delivery.from_url(server.url), Holdings(4), SessionSettings("w0"))
            settings = RunnerSettings(idle_poll_s=0.02, drain_timeout_s=0.5)
            sidecar = Sidecar(session, EngineClient.open(EngineOptions(engine)), settings)
            killed: list[float] = []

            def kill() -> None:
                server.kill()
                killed.append(time.monotonic())

            first_generation(monkeypatch, kill)

            def outage_for_3s() -> bool:
                said = [r.getMessage() for r in caplog.records]
                lines = ("during complete", "not claiming", "heartbeat failed")
                every_kind = all(any(line in message for message in said) for line in lines)
                return bool(killed) and time.monotonic() - killed[0] > 3.0 and every_kind

            with caplog.at_level(logging.WARNING, logger="service.sidecar"):
                run_until(sidecar, outage_for_3s)
        finally:
            server.stop()
    completes = [r for r in caplog.records if "during complete" in r.getMessage()]
    claims = [r for r in caplog.records if "not claiming" in r.getMessage()]
    assert killed
    heartbeats = [r for r in caplog.records if "heartbeat failed" in r.getMessage()]
    assert 1 <= len(completes) <= 2, [r.getMessage() for r in completes]
    assert (len(claims), len(heartbeats)) == (1, 1)
    assert {getattr(r, "schedule_id", None) for r in completes} == {"outage"}


def test_every_line_a_sidecar_logs_names_its_worker(tmp_path: Path, redis_url: str) -> None:
    """Lines of every worker end up in one log store: one that says an engine is not ready must say whose."""
    with cluster(tmp_path) as procs:
        worker = procs.spawn(
            "side",
            [
                "sidecar",
                "--worker-id",
                "h100-7",
                "--engine-url",
                "http://127.0.0.1:9",
                "--redis-url",
                redis_url,
            ],
        )
        wait_until(lambda: "engine not ready" in worker.log.read_text(), 30.0, "the not-ready line")
        worker.signal(signal.SIGTERM)
        worker.stats()
    lines = [json.loads(line) for line in worker.log.read_text().splitlines() if line.startswith("{")]
    assert lines
    assert {line.get("worker_id") for line in lines} == {"h100-7"}


def test_the_line_for_a_schedule_the_trainer_cancelled_carries_its_schedule_id(
    redis_client: object, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Found by a heartbeat (no item's context), the line named the schedule in its text only, so a
    log search by ``schedule_id`` missed it on some workers and found it on others."""
    logs.install_record_factory()
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "given-up", {"w0": [item("a", 0, 10)]})
    delivery.cancel("given-up")
    session = WorkerSession(Delivery.from_url(redis_url), Holdings(4), SessionSettings("w0"))
    with caplog.at_level(logging.INFO, logger="service.sidecar"):
        assert asyncio.run(session.found_cancelled("given-up"))
    lines = [r for r in caplog.records if "cancelled by the trainer" in r.getMessage()]
    assert [getattr(r, "schedule_id", None) for r in lines] == ["given-up"]

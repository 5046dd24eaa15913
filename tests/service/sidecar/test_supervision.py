"""A sidecar loop that dies of a bug stops the sidecar loudly: it is not left running half alive.

The bug is real code raising inside the loop (a method of the session or the runner replaced by one
that raises, as a bad value would make it), against real Redis and a real engine-sim. Before
``supervision`` the loop's task ended silently ("Task exception was never retrieved" at best): the
sidecar went on claiming while its leases lapsed (no heartbeats) and ``/health`` said ok.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest
import redis
import typer
from typer.testing import CliRunner

from service.commands import sidecar as sidecar_command
from service.delivery.protocol import Delivery
from service.sidecar import launch
from service.sidecar.engine_client import EngineClient, EngineOptions
from service.sidecar.health import Probes
from service.sidecar.holdings import Holdings
from service.sidecar.runner import RunnerSettings, Sidecar
from service.sidecar.session import SessionSettings, WorkerSession
from service.sidecar.supervision import EXIT_LOOP_DIED, LoopDiedError, Supervisor
from tests.service.sidecar.procs import item, publish
from tests.service.sidecar.pullclient import serving

LEASE_TTL_MS = 60_000  # nothing here may wait for a lease to lapse: a hand-back is what is counted


def _sidecar(redis_url: str, engine_url: str) -> Sidecar:
    settings = SessionSettings("w0", heartbeat_interval_s=0.1)
    session = WorkerSession(Delivery.from_url(redis_url), Holdings(4), settings)
    return Sidecar(session, EngineClient.open(EngineOptions(engine_url)), RunnerSettings(idle_poll_s=0.02))


def _bug(*_: Any, **__: Any) -> Any:
    raise ZeroDivisionError("float division by zero")


def _break_heartbeats(runner: Sidecar) -> None:
    """The heartbeat loop's wait reads its interval each turn: raising there kills the loop."""
    runner.session.heartbeat_interval = _bug  # type: ignore[method-assign]


def _break_item_tasks(runner: Sidecar) -> None:
    """An item's task records its generation time once the engine answered: raising there kills it
    with its lease still held (and heartbeated) with nothing running it."""
    runner.generation.observe = _bug  # type: ignore[method-assign]


async def _run_until_broken(runner: Sidecar, break_it: Any, items: int) -> tuple[BaseException | None, float]:
    """Run ``runner`` until ``items`` run on the engine, break it, and wait up to 10 s for ``run`` to
    end; what it raised and how long it took after the break."""
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop))
    while runner.session.holdings.in_flight() < items:
        await asyncio.sleep(0.01)
    break_it(runner)
    broken = time.monotonic()
    try:
        await asyncio.wait_for(task, 10.0)
    except Exception as error:
        return error, time.monotonic() - broken
    finally:
        stop.set()
        await runner.engine.aclose()
    return None, time.monotonic() - broken


@pytest.mark.parametrize(
    ("break_it", "loop", "actual"),
    [
        (_break_heartbeats, "heartbeat loop", 200_000),  # ~15 s each: all still running at the break
        (_break_item_tasks, "task of item", 2_000),  # ~0.15 s: the first answer trips the bug
    ],
)
def test_a_loop_that_dies_of_a_bug_stops_the_sidecar_which_hands_its_leases_back_and_fails_its_probe(
    redis_client: redis.Redis,
    redis_url: str,
    engine_url: str,
    break_it: Any,
    loop: str,
    actual: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "bug", {"w0": [item(f"p{i}", 0, actual) for i in range(6)]}, lease_ttl_ms=LEASE_TTL_MS)
    runner = _sidecar(redis_url, engine_url)
    with caplog.at_level(logging.CRITICAL, logger="service.sidecar"):
        error, took_s = asyncio.run(_run_until_broken(runner, break_it, 4))
    assert isinstance(error, LoopDiedError)
    assert loop in str(error)
    assert "ZeroDivisionError" in str(error)
    assert took_s < 5.0  # at once, not at a drain timeout (20 s) nor a lease's lapse
    critical = [r for r in caplog.records if r.levelno == logging.CRITICAL]
    assert len(critical) == 1
    assert loop in critical[0].getMessage()
    assert critical[0].exc_info is not None
    progress = delivery.progress("bug")  # everything back in the queue at once: nothing left leased
    assert (progress.running, progress.queued + progress.done) == (0, 6)
    health = Probes(runner, "w0").health()
    assert health.status == 503
    assert b'"status":"failed"' in health.body
    assert loop.encode() in health.body


def test_a_pull_sidecar_whose_heartbeats_die_fails_its_probes_and_is_told_to_stop(
    redis_client: redis.Redis, redis_url: str
) -> None:
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "pullbug", {"w0": [item("a", 0, 10), item("b", 0, 10)]}, lease_ttl_ms=LEASE_TTL_MS)
    settings = SessionSettings("w0", heartbeat_interval_s=0.1)
    session = WorkerSession(Delivery.from_url(redis_url), Holdings(4), settings)
    deaths: list[LoopDiedError] = []

    async def script() -> list[Any]:
        async with serving(session, lifespan=True, on_failure=deaths.append) as (api, _):
            while (await api.get("/next", params={"wait_s": 1})).status_code != 200:
                pass  # the takeover first
            session.heartbeat_interval = _bug  # type: ignore[method-assign]
            deadline = time.monotonic() + 5.0
            while not deaths and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            health, ready = await api.get("/health"), await api.get("/ready")
            return [len(deaths), health.status_code, health.json(), ready.status_code, ready.json()["status"]]

    deaths_seen, health_status, health, ready_status, ready = asyncio.run(script())
    assert (deaths_seen, health_status, ready_status, ready) == (1, 503, 503, "failed")
    assert health["status"] == "failed"
    assert "heartbeat loop" in health["error"]
    progress = delivery.progress("pullbug")  # the lease handed to the worker went back at the exit
    assert (progress.running, progress.queued) == (0, 2)


def test_the_command_exits_70_with_one_line_naming_the_loop_that_died(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not 0 (a supervisor would not restart it) nor 2 (bad flags: a restart would not help)."""

    def died(_: launch.SidecarOptions, __: object = None) -> None:
        raise LoopDiedError("heartbeat loop", ZeroDivisionError("float division by zero"))

    monkeypatch.setattr(launch, "run_push", died)
    app = typer.Typer()
    app.add_typer(typer.Typer(), name="bench")
    sidecar_command.register(app, typer.Typer())
    args = ["sidecar", "--worker-id", "w", "--redis-url", "redis://r", "--engine-url", "http://e"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == EXIT_LOOP_DIED == 70
    assert result.stderr.strip() == (
        "sidecar: the sidecar's heartbeat loop died (ZeroDivisionError: float division by zero)"
    )


def test_a_loop_that_returns_is_a_death_and_one_raising_during_the_stop_is_not_excused() -> None:
    """No loop returns (each runs until cancelled): one that does is recorded dead ("returned"), as one
    that raised; ``stop`` excuses only the returns its own cancel causes, not an error met on the way."""

    async def returns() -> None:
        return None

    async def raises_when_cancelled() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            raise ZeroDivisionError("float division by zero") from None

    async def scenario() -> tuple[str, str]:
        deaths: list[LoopDiedError] = []
        first = Supervisor(on_death=deaths.append)
        first.start("takeover", returns())
        await asyncio.sleep(0.05)
        second = Supervisor(on_death=deaths.append)
        second.start("heartbeat loop", raises_when_cancelled())
        await asyncio.sleep(0.05)
        await second.stop()
        return str(first.dead), str(second.dead)

    returned, raised = asyncio.run(scenario())
    assert returned == "the sidecar's takeover died (returned)"
    assert raised == "the sidecar's heartbeat loop died (ZeroDivisionError: float division by zero)"

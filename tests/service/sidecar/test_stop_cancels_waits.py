"""A push sidecar's stop cancels the waits it cut short that nobody needs the answer of any more.

The main loop's engine readiness probe and its Redis version check give way to a stop
(``waits.done_else_dropped``), and are cancelled then: left running, a probe of a frozen engine
held its connection for its whole timeout (60 s here) past the sidecar's own exit from ``run``,
and its end, an error nobody read, came after. Once ``run`` returns, no task of the sidecar's is
left running (``test_exit_in_a_stall.py`` holds the exit's time to the drain).
"""

from __future__ import annotations

import asyncio
import signal
import socket
from collections.abc import Callable

import redis

from service.delivery.protocol import Delivery
from service.delivery.stored import REPLY_DECODING
from service.embedded import EmbeddedServer
from service.redis_conn import VersionCheck
from service.sidecar.engine_client import EngineClient, EngineOptions
from service.sidecar.holdings import Holdings
from service.sidecar.runner import RunnerSettings, Sidecar
from service.sidecar.session import SessionSettings, WorkerSession

SETTINGS = RunnerSettings(idle_poll_s=0.02, drain_timeout_s=0.1)


async def _left_after_stop(
    sidecar: Sidecar, engine: EngineClient, resume: Callable[[], None] = lambda: None
) -> set[asyncio.Task[object]]:
    """The tasks still running once ``sidecar.run`` returned, stopped while its wait was out; then
    ``resume`` (the stalled server) and the engine client closed."""
    stop = asyncio.Event()
    run = asyncio.create_task(sidecar.run(stop))
    await asyncio.sleep(0.5)  # its wait is out, and waits
    stop.set()
    try:
        await asyncio.wait_for(run, 30.0)
        return asyncio.all_tasks() - {asyncio.current_task()}
    finally:
        resume()  # the abandoned call's thread ends, and asyncio.run returns
        await engine.aclose()


def test_a_stop_cancels_the_readiness_probe_of_a_frozen_engine(redis_url: str) -> None:
    frozen = socket.create_server(("127.0.0.1", 0))  # listens, accepts (the backlog), never reads
    try:
        session = WorkerSession(Delivery.from_url(redis_url), Holdings(2), SessionSettings("w0"))
        engine_url = f"http://127.0.0.1:{frozen.getsockname()[1]}"
        engine = EngineClient.open(EngineOptions(engine_url, probe_timeout_s=60))
        sidecar = Sidecar(session, engine, SETTINGS)
        assert asyncio.run(_left_after_stop(sidecar, engine)) == set()
        assert not sidecar.engine_up  # the probe was out, and never answered
    finally:
        frozen.close()


def test_a_stop_cancels_the_version_check_of_a_paused_redis() -> None:
    """The takeover's own check is left out, as in ``test_exit_in_a_stall.py``, so that the main
    loop's is the one waiting on the server."""
    server = EmbeddedServer().start()
    try:
        client = redis.Redis.from_url(server.url, socket_timeout=60, **REPLY_DECODING)
        session = WorkerSession(Delivery(client), Holdings(2), SessionSettings("w0"))
        engine = EngineClient.open(EngineOptions("http://127.0.0.1:9"))  # never reached: Redis first
        sidecar = Sidecar(session, engine, SETTINGS, version=VersionCheck(client, server.url))
        sidecar.takeover.version = None
        server.signal(signal.SIGSTOP)
        try:
            left = asyncio.run(_left_after_stop(sidecar, engine, lambda: server.signal(signal.SIGCONT)))
        finally:
            server.signal(signal.SIGCONT)
        assert left == set()
    finally:
        server.stop()

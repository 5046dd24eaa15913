"""A push-mode sidecar (``Sidecar``) in process for worker ``w0``, on real Redis and an engine on
loopback, its poll short and its bounds the test's. The runner and runner-cancel tests build it alike,
so a change to how a test sidecar is made reaches both, rather than through one test module's private
name."""

from __future__ import annotations

from service.delivery.protocol import Delivery
from service.sidecar.engine_client import EngineClient, EngineOptions
from service.sidecar.holdings import Holdings
from service.sidecar.runner import RunnerSettings, Sidecar
from service.sidecar.session import SessionSettings, WorkerSession


def push_sidecar(
    redis_url: str,
    engine: str,
    slots: int = 8,
    kv: int | None = None,
    heartbeat_s: float | None = None,
    drain_timeout_s: float = 20.0,
    engine_wait_s: float = 1.0,
    holdings: Holdings | None = None,
) -> Sidecar:
    """Worker ``w0``'s sidecar with ``slots`` slots (``kv`` KV tokens) or ``holdings``, its engine at
    ``engine``, polling every 20 ms; not started."""
    session = WorkerSession(
        Delivery.from_url(redis_url),
        Holdings(slots, kv) if holdings is None else holdings,
        SessionSettings("w0", heartbeat_interval_s=heartbeat_s),
    )
    client = EngineClient.open(EngineOptions(engine))
    settings = RunnerSettings(idle_poll_s=0.02, drain_timeout_s=drain_timeout_s, engine_wait_s=engine_wait_s)
    return Sidecar(session, client, settings)

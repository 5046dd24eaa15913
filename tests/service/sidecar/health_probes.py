"""The sidecar's health probes (``HealthServer``) served on a free port for a test, and a client of
them. The health and health-hosts tests reach the probes alike, so a change to how they are served
reaches both, rather than through one test module's name."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from service.sidecar.health import CLIENT_TIMEOUT_S, STALE_S, HealthServer
from service.sidecar.runner import Sidecar


@contextmanager
def probes_of(
    runner: Sidecar | None,
    stale_s: float = STALE_S,
    client_timeout_s: float = CLIENT_TIMEOUT_S,
    bound: str = "127.0.0.1",
) -> Iterator[httpx.Client]:
    """A client of the probes of ``runner`` (None: still connecting), served on a free port of
    ``bound`` (the address the port listens on; the client reaches it on loopback either way)."""
    server = HealthServer(runner, "w0", bound, 0, stale_s, client_timeout_s)
    server.start()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=5.0) as client:
            yield client
    finally:
        server.stop()

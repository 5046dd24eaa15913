"""Fixtures of the sidecar tests: a real engine-sim server on loopback (``procs.cluster``), and a
Redis-compatible server of a test's own to pause."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.embedded import EmbeddedServer
from tests.service.sidecar.procs import cluster


@pytest.fixture
def engine_url(tmp_path: Path) -> Iterator[str]:
    """One engine-sim taking 10 ms a token, so a request runs long enough to be seen running and cut."""
    with cluster(tmp_path) as procs:
        yield procs.engine_threads({"engine": 0.01})["engine"]


@pytest.fixture
def server() -> Iterator[EmbeddedServer]:
    """A server of the test's own, to SIGSTOP (resumed and stopped after it)."""
    server = EmbeddedServer().start()
    try:
        yield server
    finally:
        server.signal(signal.SIGCONT)
        server.stop()

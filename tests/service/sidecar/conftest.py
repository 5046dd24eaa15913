"""Fixtures of the sidecar tests: a real engine-sim server on loopback (``procs.cluster``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.service.sidecar.procs import cluster


@pytest.fixture
def engine_url(tmp_path: Path) -> Iterator[str]:
    """One engine-sim taking 10 ms a token, so a request runs long enough to be seen running and cut."""
    with cluster(tmp_path) as procs:
        yield procs.engine_threads({"engine": 0.01})["engine"]

"""Fixtures of the caller's-deadline tests that run on an app of the test's clock
(``tests/service/api/slow_upload.py``): the factory of such apps, and the two ids a refused request
is sent under, so that each test states its refusal once for both; and a private server, which the
tests of a ``serve`` child stuck in a call hold one of its clients on until the child ends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from service.embedded import EmbeddedServer
from tests.service.api.slow_upload import SlowClient, slow_clients


@pytest.fixture
def slow_client(redis_url: str, redis_client: redis.Redis, tmp_path: Path) -> Iterator[SlowClient]:
    """Apps on clocks of their own, each request's body taking a chosen time to arrive."""
    with slow_clients(redis_url, tmp_path) as factory:
        yield factory


@pytest.fixture(params=[("late", 1), (None, 0)], ids=["chosen-id", "drawn-id"])
def late_id(request: pytest.FixtureRequest) -> tuple[str | None, int]:
    """The id a refused request is sent under and whether it is marked in flight: ``late`` chosen
    (marked), or none (drawn by the service: no mark)."""
    chosen: tuple[str | None, int] = request.param
    return chosen


@pytest.fixture
def server() -> Iterator[EmbeddedServer]:
    """A private server: a stuck call holds one of its clients until the child ends."""
    with EmbeddedServer() as srv:
        yield srv

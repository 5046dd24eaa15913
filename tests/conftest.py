"""Shared fixtures: a real Redis-compatible server (never a mock) and the path to the shared real data."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import typer

from service.embedded import EmbeddedServer

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """``REDIS_URL`` when set (any real server), else a session-wide embedded valkey-server."""
    env = os.environ.get("REDIS_URL")
    if env:
        yield env
        return
    with EmbeddedServer() as server:
        yield server.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A client on a flushed database, so each test starts from nothing."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


@pytest.fixture
def shared_data() -> Path:
    """The folder of real rollout data beside the checkout; skips the test cleanly where it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data folder {SHARED_DATA} is absent")
    return SHARED_DATA


@pytest.fixture(scope="session")
def cli() -> typer.Typer:
    """The root app with every command group attached (what the console script runs), for CliRunner."""
    from service.cli import _register, app

    if not any(g.name == "trace" for g in app.registered_groups):
        _register()  # once per session: registering twice would duplicate every command
    return app

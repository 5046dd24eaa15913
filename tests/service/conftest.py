"""Fixtures of the service tests that drive the app: one on the real test Redis, with or without tokens.

Here, one conftest above every folder that calls the app (api, auth, client, hosts, learning, pipeline,
problems, speeds), so each finds them as pytest finds any fixture, by walking up the tree. The autouse
``testclient_host`` so reaches every service test; it only adds the ``TestClient``'s own name to the
allow list, a name no real client sends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from service.app import create_app
from service.settings import Settings
from tests.cluster import LocalCluster
from tests.service.api_helpers import TRAINER, WORKER, AppFactory
from tests.service.held_port import held_port


@pytest.fixture(autouse=True)
def testclient_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """A service without tokens answers only to loopback names and ``ROLLOUT_ALLOWED_HOSTS``
    (``service/hosts/allow_list.py``); a ``TestClient`` names ``testserver``, so every app built here (each
    reads its settings from the environment too) lists it, as an operator would a name of theirs."""
    monkeypatch.setenv("ROLLOUT_ALLOWED_HOSTS", "testserver")


@pytest.fixture
def make_client(redis_url: str, redis_client: redis.Redis, tmp_path: Path) -> Iterator[AppFactory]:
    """Build an app with settings overrides and open a TestClient on it (lifespan included)."""
    opened: list[TestClient] = []

    def factory(**overrides: Any) -> TestClient:
        options: dict[str, Any] = {"redis_url": redis_url, "model_dir": str(tmp_path / "models")}
        options.update(overrides)
        client = TestClient(create_app(Settings(**options)), raise_server_exceptions=False)
        client.__enter__()
        opened.append(client)
        return client

    yield factory
    for client in opened:
        client.__exit__(None, None, None)


@pytest.fixture
def client(make_client: AppFactory) -> TestClient:
    """An app without auth (loopback development mode)."""
    return make_client()


@pytest.fixture(scope="module")
def module_app(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """One app without auth for a whole module, for the modules whose tests the app answers from the
    request and Redis alone (a body refused, a count read), not from its own state since it started. An
    app per test cost ~30 ms of CPU, most of such a test's (docs/experiments.md, apici58). Such a
    module's ``client`` is this beside ``redis_client``: each test still starts on a flushed Redis."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("ROLLOUT_ALLOWED_HOSTS", "testserver")  # what ``testclient_host`` sets per test
        settings = Settings(redis_url=redis_url, model_dir=str(tmp_path_factory.mktemp("models")))
    with TestClient(create_app(settings), raise_server_exceptions=False) as app:
        yield app


@pytest.fixture
def secured(make_client: AppFactory) -> TestClient:
    """An app with one trainer and one worker token."""
    return make_client(trainer_tokens=TRAINER, worker_tokens=WORKER)


@pytest.fixture
def live_settings(redis_url: str, redis_client: redis.Redis, tmp_path: Path) -> Settings:
    return Settings(redis_url=redis_url, model_dir=str(tmp_path / "models"))


@pytest.fixture
def cluster_app(redis_cluster: LocalCluster, tmp_path: Path) -> Iterator[TestClient]:
    """The service on the real 3-master Redis Cluster, its models in ``tmp_path``; the masters emptied
    before and after, so each test starts from nothing and leaves nothing to the next."""
    redis_cluster.flushall()
    settings = Settings(redis_url=redis_cluster.url, redis_cluster=True, model_dir=str(tmp_path))
    with TestClient(create_app(settings)) as client:
        yield client
    redis_cluster.flushall()


@pytest.fixture
def held_redis_port() -> Iterator[int]:
    """A port for a Redis the test starts later (or never), held until the test ends: the child it
    points there meets no server another test started on a port it picked (``tests.service.held_port``)."""
    with held_port() as port:
        yield port

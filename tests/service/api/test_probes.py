"""The probes and /metrics answer HEAD as they answer GET, without a body: load balancers, monitoring
checks and ``curl -I`` use it."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from service.app import create_app
from service.embedded import EmbeddedServer
from service.settings import Settings
from tests.service.api_helpers import TRAINER, LiveServer, bearer

PROBES = ["/healthz", "/readyz"]


@pytest.fixture
def private_redis() -> Iterator[EmbeddedServer]:
    server = EmbeddedServer().start()
    yield server
    server.stop()


def _head_and_get(client: TestClient, path: str) -> tuple[tuple[int, str, str], tuple[int, str, str]]:
    """(status, content type, content length) of a HEAD and of a GET of ``path``."""
    head, get = client.head(path), client.get(path)
    return (
        (head.status_code, head.headers["content-type"], head.headers["content-length"]),
        (get.status_code, get.headers["content-type"], str(len(get.content))),
    )


@pytest.mark.parametrize("path", PROBES)
def test_head_of_a_probe_answers_as_its_get(path: str, client: TestClient) -> None:
    head, get = _head_and_get(client, path)
    assert head == get
    assert head[0] == 200


def test_head_of_readyz_is_a_503_while_redis_is_down(private_redis: EmbeddedServer, tmp_path: Path) -> None:
    settings = Settings(redis_url=private_redis.url, model_dir=str(tmp_path), redis_timeout_s=0.5)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        private_redis.kill()
        head, get = _head_and_get(client, "/readyz")
    assert head[0] == get[0] == 503


def test_head_of_metrics_answers_200_with_the_exposition_headers(client: TestClient) -> None:
    head, get = client.head("/metrics"), client.get("/metrics")
    assert (head.status_code, head.headers["content-type"]) == (get.status_code, get.headers["content-type"])
    assert head.status_code == 200
    assert head.content == b""


@pytest.mark.parametrize("path", [*PROBES, "/metrics"])
def test_head_of_a_probe_sends_no_body_on_the_wire(path: str, live_settings: Settings) -> None:
    with LiveServer(live_settings) as server, socket.create_connection(("127.0.0.1", server.port), 5) as sock:
        sock.sendall(f"HEAD {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
        sock.settimeout(5)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert body == b""


def test_readyz_names_where_redis_is_only_to_a_caller_with_a_token(
    private_redis: EmbeddedServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The probe stays open, but an anonymous caller of a service with tokens learns only that Redis is
    unreachable, not its host and port; a token's holder, and the log, read the whole error."""
    settings = Settings(
        redis_url=private_redis.url,
        model_dir=str(tmp_path),
        redis_timeout_s=0.5,
        trainer_tokens=SecretStr(TRAINER),
    )
    where = f"127.0.0.1:{private_redis.port}"
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        private_redis.kill()
        with caplog.at_level(logging.WARNING, logger="service.health"):
            anonymous = client.get("/readyz")
        known = client.get("/readyz", headers=bearer(TRAINER))
    assert (anonymous.status_code, anonymous.json()["redis"]) == (503, "unreachable")
    assert known.status_code == 503
    assert known.json()["redis"].startswith("unreachable: ")
    assert where in known.json()["redis"]
    assert [r.getMessage() for r in caplog.records if where in r.getMessage()]

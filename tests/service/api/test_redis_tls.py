"""A rediss:// Redis: the service plans and publishes over TLS; a server its CA does not vouch for is refused.

The embedded valkey-server is built without TLS, so the test puts a TLS terminator in front of it,
as a managed rediss:// endpoint or stunnel does: the client side (URL scheme, CA file, certificate
check) is ours, and that is what runs here. Certificates come from ``trustme``, a throwaway CA.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import trustme
from fastapi.testclient import TestClient

from service.app import create_app
from service.embedded import EmbeddedServer
from service.redis_conn import connect
from service.settings import Settings
from tests.service.api_helpers import batch_body
from tests.service.tls_terminator import TlsTerminator


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def tls_redis(ca: trustme.CA) -> Iterator[int]:
    """The port of a TLS endpoint (certificate for 127.0.0.1, signed by ``ca``) in front of valkey."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    with EmbeddedServer() as server:
        terminator = TlsTerminator(server.port, context)
        yield terminator.port
        terminator.close()


def _settings(port: int, ca_file: Path, tmp_path: Path) -> Settings:
    return Settings(
        redis_url=f"rediss://127.0.0.1:{port}/0", redis_tls_ca_file=str(ca_file), model_dir=str(tmp_path)
    )


def test_the_service_plans_and_publishes_over_rediss(tls_redis: int, ca: trustme.CA, tmp_path: Path) -> None:
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    settings = _settings(tls_redis, ca_file, tmp_path)
    with TestClient(create_app(settings)) as client:
        assert client.get("/readyz").status_code == 200
        answer = client.post("/schedule", json=batch_body(prompts=4, n=2, workers=2))
        assert answer.status_code == 200
        assert answer.json()["published"] is True
    reader = connect(settings)
    assert reader.exists(*reader.scan_iter("rs:*")) > 0  # the published keys, read back over TLS
    reader.close()


def test_a_server_certificate_from_another_ca_is_refused(tls_redis: int, tmp_path: Path) -> None:
    stranger = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(stranger))
    client = connect(_settings(tls_redis, stranger, tmp_path))
    with pytest.raises(redis.ConnectionError, match=r"(?i)certificate verify failed"):
        client.ping()
    client.close()

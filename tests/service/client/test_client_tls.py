"""A client verifies an https:// service against the CAs the process trusts when the client is made
(certifi's bundle, or the CAs ``SSL_CERT_FILE`` or ``SSL_CERT_DIR`` name, as httpx's default does),
with one TLS context shared by the process's clients (``service.client.tls``): a server no trusted CA
vouches for is refused, a CA named after an earlier client was made is trusted by the next one, a key
log file named after it is written by the next one, and a process making client after client loads the
CAs once, not once a client (~34 ms of CPU each).

The service here is a one-line HTTPS server whose certificate comes from ``trustme``, a throwaway CA:
every request it reads is answered 418, so a refusal with that status is a request that got through.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
import trustme

from service.client.scheduler_client import SchedulerClient
from service.client.wire import SchedulerAPIError, ServiceUnreachableError
from tests.service.client.local_server import serving

CA_VARIABLES = ("SSL_CERT_FILE", "SSL_CERT_DIR", "SSLKEYLOGFILE")  # what a context reads as it is built


class _Teapot(BaseHTTPRequestHandler):
    """Answers every request 418 with a problem body."""

    def do_POST(self) -> None:
        body = b'{"title": "I am a teapot", "status": 418}'
        self.send_response(418)
        self.send_header("content-type", "application/problem+json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        """Quiet: the test reads the client's side."""


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def https_url(ca: trustme.CA) -> Iterator[str]:
    """An https:// service on loopback whose certificate (for 127.0.0.1) ``ca`` signed."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    with serving(_Teapot, context) as base:  # a refused handshake is dropped
        yield base


@pytest.fixture
def no_ca_variables(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """Neither CA variable set, nor a key log: the clients trust certifi's bundle, as a trainer's
    process would."""
    for name in CA_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def _status(url: str) -> int:
    """The status of a fresh client's request to ``url`` (sent once: ``retrain``); 0 where the service's
    certificate was refused, before any request was sent."""
    with SchedulerClient(url) as client, pytest.raises(SchedulerAPIError) as refused:
        client.retrain()
    if isinstance(refused.value, ServiceUnreachableError):
        assert "CERTIFICATE_VERIFY_FAILED" in str(refused.value), refused.value
        return 0
    return refused.value.status


def test_a_service_whose_certificate_no_trusted_ca_signed_is_refused(
    https_url: str, no_ca_variables: pytest.MonkeyPatch
) -> None:
    assert _status(https_url) == 0


def test_a_client_made_after_ssl_cert_file_names_the_ca_trusts_it_and_one_made_after_it_is_unset_not(
    https_url: str, ca: trustme.CA, no_ca_variables: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    assert _status(https_url) == 0  # a client of the process before: its context is built and kept
    no_ca_variables.setenv("SSL_CERT_FILE", str(ca_file))
    assert _status(https_url) == 418
    no_ca_variables.delenv("SSL_CERT_FILE")
    assert _status(https_url) == 0


def test_a_client_made_after_sslkeylogfile_is_set_writes_its_tls_keys_there(
    https_url: str, ca: trustme.CA, no_ca_variables: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # the shared context was built before the variable was set, and kept: no key log was written
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    no_ca_variables.setenv("SSL_CERT_FILE", str(ca_file))
    assert _status(https_url) == 418  # a client of the process before: its context is built and kept
    keys = tmp_path / "keys.log"
    no_ca_variables.setenv("SSLKEYLOGFILE", str(keys))
    assert _status(https_url) == 418
    assert keys.is_file()
    assert "CLIENT_TRAFFIC_SECRET_0 " in keys.read_text()  # TLS 1.3: the secret a capture is read with


class _Built:
    """``ssl.create_default_context`` counted: the CA arguments of each context it builds."""

    def __init__(self) -> None:
        self.made = ssl.create_default_context
        self.calls: list[dict[str, Any]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> ssl.SSLContext:
        self.calls.append(kwargs)
        return self.made(*args, **kwargs)


def test_clients_made_one_after_another_load_the_cas_once_between_them(
    no_ca_variables: pytest.MonkeyPatch,
) -> None:
    built = _Built()
    no_ca_variables.setattr(ssl, "create_default_context", built)
    for _ in range(3):
        SchedulerClient("http://127.0.0.1:1").close()
    assert len(built.calls) <= 1, built.calls  # none where an earlier client of the process built it


def test_a_client_made_after_ssl_cert_dir_is_set_verifies_with_the_cas_of_that_folder(
    no_ca_variables: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    SchedulerClient("http://127.0.0.1:1").close()  # the context without the variable, kept
    built = _Built()
    no_ca_variables.setattr(ssl, "create_default_context", built)
    no_ca_variables.setenv("SSL_CERT_DIR", str(tmp_path))
    SchedulerClient("http://127.0.0.1:1").close()
    assert built.calls == [{"capath": str(tmp_path)}]

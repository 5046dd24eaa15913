"""The embedded valkey-server: it binds a port of its own, and answers only as itself."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
import redis

from service import embedded
from service.embedded import EmbeddedServer, PortTakenError
from service.ports import free_port


@pytest.fixture
def held_port() -> Iterator[int]:
    """A loopback port another process (this test) is listening on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_a_picked_port_taken_before_the_bind_is_picked_again(
    held_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    picks = iter([held_port, free_port()])
    monkeypatch.setattr(embedded, "free_port", lambda: next(picks))
    with EmbeddedServer() as server:
        assert server.port != held_port
        assert redis.Redis.from_url(server.url).ping()


def test_a_port_given_and_taken_is_refused_by_name(held_port: int) -> None:
    with pytest.raises(PortTakenError, match=r"(?i)address already in use"):
        EmbeddedServer(port=held_port).start()


def test_another_valkey_on_the_port_is_not_mistaken_for_ours() -> None:
    with EmbeddedServer() as first:
        second = EmbeddedServer(port=first.port)
        with pytest.raises(PortTakenError):
            second.start()  # the first answers PING on that port, but it is not this one's process
        second.stop()


def test_a_server_that_never_answers_is_not_left_running_after_the_failed_start() -> None:
    """With a password the readiness PING is refused: start fails, and must not leak the process."""
    server = EmbeddedServer(extra_args=("--requirepass", "s3cret"))
    with pytest.raises(embedded.EmbeddedServerError, match="did not answer"):
        server.start(timeout_s=1.0)
    with pytest.raises(ConnectionRefusedError):  # nobody listens there any more: not orphaned
        socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
    server.stop()

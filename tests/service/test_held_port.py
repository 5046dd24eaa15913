"""A port held for a Redis a test starts later refuses connections until then, is taken by no other
bind, and takes the valkey-server started on it."""

from __future__ import annotations

import errno
import socket

import pytest
import redis

from service.embedded import EmbeddedServer
from tests.service.held_port import held_port


def test_a_held_port_refuses_connections_as_a_port_with_no_server() -> None:
    with held_port() as port, pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), 5).close()


def test_no_other_bind_takes_a_held_port() -> None:
    """``free_port``'s check binds a port as this does; the kernel's own picks skip a bound port."""
    with held_port() as port, socket.socket() as other:
        with pytest.raises(OSError) as refused:
            other.bind(("127.0.0.1", port))
        assert refused.value.errno == errno.EADDRINUSE


def test_a_valkey_server_started_on_a_held_port_serves_on_it() -> None:
    with held_port() as port:
        server = EmbeddedServer(port=port).start()
        try:
            with redis.Redis(port=port, socket_timeout=5) as client:
                assert client.ping()
        finally:
            server.stop()

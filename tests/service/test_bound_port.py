"""A server asked for port 0 is found on the port the kernel gave it: nothing to race for."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from service.settings import Settings
from tests.service.api_helpers import LiveServer
from tests.service.bound_port import child_port, listening_ports

# a child that listens on a port the kernel picks, says which on stdout, and waits for its stdin to close
LISTENER = (
    "import socket, sys; s = socket.create_server(('127.0.0.1', 0)); "
    "print(s.getsockname()[1], flush=True); sys.stdin.read()"
)
pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the child's sockets from /proc")


def _listener(*code: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", "; ".join(code) or LISTENER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_child_on_port_0_is_found_on_the_port_it_bound() -> None:
    child = _listener()
    try:
        assert child.stdout is not None
        said = int(child.stdout.readline())
        assert child_port(child, 60) == said
        with socket.create_connection(("127.0.0.1", said), 5):
            pass
    finally:
        child.communicate("", timeout=30)


def test_a_connected_or_merely_bound_socket_is_no_listening_port() -> None:
    """Only the child's own listening sockets count: not a bound one (``serve``'s check that its port
    is free), nor a connection it made (its Redis client)."""
    code = (
        "import socket, sys",
        "b = socket.socket(); b.bind(('127.0.0.1', 0))",
        "srv = socket.create_server(('127.0.0.1', 0)); c = socket.create_connection(srv.getsockname())",
        "srv.close(); print(b.getsockname()[1], c.getsockname()[1], flush=True); sys.stdin.read()",
    )
    child = _listener(*code)
    try:
        assert child.stdout is not None
        child.stdout.readline()
        assert listening_ports(child.pid) == set()
    finally:
        child.communicate("", timeout=30)


def test_a_child_that_exits_before_it_listens_fails_with_its_stderr() -> None:
    child = _listener("import sys; sys.exit('refused: no port for you')")
    with pytest.raises(AssertionError, match="refused: no port for you"):
        child_port(child, 60)


def test_a_live_server_given_no_port_serves_on_the_one_it_bound(live_settings: Settings) -> None:
    with LiveServer(live_settings) as server:
        assert server.port > 0
        assert server.port in listening_ports(int(Path("/proc/self").resolve().name))
        assert httpx.get(f"{server.url}/healthz", timeout=30).status_code == 200

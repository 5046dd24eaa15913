"""``bench service`` without ``--url`` polls its own ``serve`` for readiness through one client: the polls
share one connection, not a client (and its SSL context, ~34 ms of CPU) each, ten a second while
``serve`` starts on the host the benchmark then measures (edges59).

The service here is a real HTTP/1.1 server answering ``/readyz`` 503 until its third ask, and counting
the connections it accepts; the ``serve`` process the poll watches is a real child that outlives it.
A ``serve`` that exits before it answers is reported as it exited, whatever the polls met."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from service.commands.bench_service import _wait_ready

READY_AT = 3  # the ask /readyz first answers 200


class _Starting(ThreadingHTTPServer):
    """A service that is ready from its ``READY_AT``-th ask on, counting asks and connections."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Readyz)
        self.asks = 0
        self.connections = 0

    def get_request(self) -> tuple[socket.socket, object]:
        """Each accepted connection, counted."""
        accepted = super().get_request()
        self.connections += 1
        return accepted


class _Readyz(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keeps a connection open between asks, as uvicorn does
    server: _Starting

    def do_GET(self) -> None:
        self.server.asks += 1
        status = 200 if self.server.asks >= READY_AT else 503
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the asks are counted, not logged."""


@pytest.fixture
def starting() -> Iterator[_Starting]:
    server = _Starting()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_the_readiness_polls_share_one_connection(starting: _Starting) -> None:
    serve = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        host, port = starting.server_address[:2]
        _wait_ready(f"http://{host!s}:{port}", serve, timeout_s=60.0)
    finally:
        serve.kill()
        serve.communicate()
    assert (starting.asks, starting.connections) == (READY_AT, 1)


def test_a_serve_that_exits_before_it_listens_is_reported_by_its_status_and_stderr() -> None:
    """The polls meet no listener (refused, as while ``serve`` starts: it fails a second in) until
    ``serve`` exits: the benchmark stops there and says why, not after its 60 s wait nor on the first
    refused poll (mutants60)."""
    with socket.socket() as reserved:
        reserved.bind(("127.0.0.1", 0))  # bound, never listening: every poll is refused
        host, port = reserved.getsockname()[:2]
        fails = "import sys, time; time.sleep(1); sys.stderr.write('no model at /m'); sys.exit(3)"
        serve = subprocess.Popen(
            [sys.executable, "-c", fails],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            with pytest.raises(RuntimeError) as failed:
                _wait_ready(f"http://{host!s}:{port}", serve, timeout_s=60.0)
        finally:
            serve.kill()
            serve.communicate()
    assert str(failed.value) == "serve exited with 3: no model at /m"

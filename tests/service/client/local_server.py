"""A real HTTP(S) server on a free loopback port, for the client tests that need an answer no service
gives (a bare 404, a redirect, a broken body, a certificate): one place that starts it on a thread and
stops it, so each test module states only its handler."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler], tls: ssl.SSLContext | None = None) -> Iterator[str]:
    """The server's base URL while the block runs (``https://`` with ``tls``, whose handshake a
    refusing client drops), then the server shut down and its thread joined."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()

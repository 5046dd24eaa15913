"""A TLS terminator in front of the embedded valkey-server (built without TLS), as a managed rediss://
endpoint or stunnel is: the client side (URL scheme, CA file, certificate check) is the service's, and
that is what the tests run. The API's rediss:// tests and the sidecar's hang-up-over-TLS test share it,
rather than the sidecar's importing it from the API's test module. ``close`` ends every thread it
started (``tests.service.relay_threads``)."""

from __future__ import annotations

import contextlib
import socket
import ssl

from tests.service.relay_threads import RelayThreads


class TlsTerminator:
    """Accepts TLS on a loopback port and forwards the plain bytes to ``upstream_port``."""

    def __init__(self, upstream_port: int, context: ssl.SSLContext) -> None:
        self.upstream_port, self.context = upstream_port, context
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self._relays = RelayThreads()
        self._relays.start(self._serve)

    def _serve(self) -> None:
        while True:
            try:
                raw, _ = self.listener.accept()
            except OSError:
                return  # closed
            self._relays.start(self._relay, raw)

    def _relay(self, raw: socket.socket) -> None:
        # tracked before its handshake (``raw`` is detached: ``secure`` holds its descriptor), so that
        # a ``close`` cuts one a client has not finished: that thread waited for the client's hang-up
        secure = self.context.wrap_socket(raw, server_side=True, do_handshake_on_connect=False)
        self._relays.track(secure)
        try:
            secure.do_handshake()
        except (ssl.SSLError, OSError):
            secure.close()  # the client refused our certificate, or the close cut it: nothing to relay
            return
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        self._relays.track(upstream)
        self._relays.start(_pump, upstream, secure)
        _pump(secure, upstream)

    def close(self) -> None:
        """Stop accepting connections, cut those open, and join the terminator's threads."""
        self._relays.close(self.listener)


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    for end in (source, sink):
        with contextlib.suppress(OSError):
            end.shutdown(socket.SHUT_RDWR)

"""A loopback TCP proxy that can lose the next reply: the server runs the command, the client never
hears back (its connection drops), as when a network path or a load balancer fails mid-reply.
``close`` ends every thread the proxy started (``tests.service.relay_threads``)."""

from __future__ import annotations

import socket
import threading
from contextlib import suppress

from tests.service.relay_threads import RelayThreads


class ReplyLosingProxy:
    """Forwards every byte both ways, except that after ``lose_next_reply()`` the next chunk the server
    sends is swallowed and that client connection is cut."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.lost = 0  # replies swallowed so far
        self._lose = threading.Event()
        self._pass = 0  # replies still to let through before the lost one
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._relays = RelayThreads()
        self._relays.start(self._accept)

    @property
    def url(self) -> str:
        """Where clients should connect."""
        return f"redis://127.0.0.1:{self.port}/0"

    def lose_next_reply(self, after: int = 0) -> None:
        """Swallow the next server-to-client chunk on any connection, then drop that connection;
        with ``after``, the chunk after that many more (one small reply each) have passed."""
        self._pass = after
        self._lose.set()

    def close(self) -> None:
        """Stop accepting connections, cut those open, and join the proxy's threads."""
        self._relays.close(self._listener)

    def _accept(self) -> None:
        with suppress(OSError):
            while True:
                client, _ = self._listener.accept()
                server = socket.create_connection(("127.0.0.1", self.upstream_port))
                self._relays.track(client, server)
                self._relays.start(self._pump, client, server, False)
                self._relays.start(self._pump, server, client, True)

    def _pump(self, src: socket.socket, dst: socket.socket, replies: bool) -> None:
        with suppress(OSError):
            while data := src.recv(65536):
                if replies and self._lose.is_set() and self._pass > 0:
                    self._pass -= 1
                elif replies and self._lose.is_set():
                    self._lose.clear()
                    self.lost += 1
                    break
                dst.sendall(data)
        for sock in (src, dst):
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

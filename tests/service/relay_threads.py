"""The threads and connections of a loopback relay in a test, ended together at its ``close``.

The reply-losing proxy (``tests/service/delivery/proxy.py``) and the TLS terminator
(``tests/service/tls_terminator.py``) each accept on a listener and pump bytes on a thread per
direction. A listening socket closed under a thread blocked in its ``accept`` leaves that thread
blocked for good on Linux, and their threads had outlived their module in its pytest-xdist worker
to the session's end (threads61). ``close`` shuts the listener down first (which wakes the
``accept``), then cuts every connection and joins every thread. A connection handed over after the
close began (a TLS relay that finished its handshake meanwhile) is cut as it is handed over: it had
been left open, and its pump thread blocked until the client hung up (review62).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable
from contextlib import suppress

JOIN_S = 5.0  # per thread: each ends as soon as its socket is shut down


class RelayThreads:
    """The threads a relay started (its accepting thread first) and the connections it opened."""

    def __init__(self) -> None:
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()  # ``track`` on a relay's thread against ``close``
        self._closed = False

    def start(self, target: Callable[..., None], *args: object) -> None:
        """Run ``target(*args)`` on a daemon thread that ``close`` joins."""
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def track(self, *sockets: socket.socket) -> None:
        """Shut ``sockets`` down at ``close`` (a connection's two ends), or now where it has begun."""
        with self._lock:
            self._sockets += sockets
            closed = self._closed
        if closed:
            _cut(sockets)

    def close(self, listener: socket.socket) -> None:
        """Stop accepting on ``listener``, cut the connections open, and join every thread, those a
        connection starts meanwhile too."""
        with suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)  # wakes the ``accept``, which a close does not
        listener.close()
        self._threads[0].join(JOIN_S)  # the accepting thread: no connection after it
        with self._lock:
            self._closed = True
            tracked = list(self._sockets)
        _cut(tracked)
        joined = 0
        while joined < len(self._threads):  # a relay may start its pump meanwhile
            self._threads[joined].join(JOIN_S)
            joined += 1


def _cut(sockets: Iterable[socket.socket]) -> None:
    """Shut each of ``sockets`` down both ways: a thread blocked on one wakes (one closed already is
    passed over)."""
    for sock in sockets:
        with suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)

"""A test relay's ``close`` (``tests.service.relay_threads``) ends every thread it started at once,
a connection's that is not yet relaying too: one whose client has not finished its TLS handshake,
and one whose sockets are handed over only after the close cut the rest. Either had been left
running, and the close waited ``JOIN_S`` (5 s) on it (review62)."""

from __future__ import annotations

import socket
import ssl
import threading
import time

from tests.service.relay_threads import JOIN_S, RelayThreads
from tests.service.tls_terminator import TlsTerminator

PROMPT_S = 1.0  # a close that joins threads ending at once: far under ``JOIN_S``
UNUSED_PORT = 9  # the terminator's upstream: no handshake here gets as far as connecting to it


def test_a_terminator_closed_while_a_client_has_not_finished_its_handshake_ends_its_threads_at_once() -> None:
    before = set(threading.enumerate())
    terminator = TlsTerminator(UNUSED_PORT, ssl.create_default_context(ssl.Purpose.CLIENT_AUTH))
    with socket.create_connection(("127.0.0.1", terminator.port)):  # says nothing: no ClientHello
        time.sleep(0.2)  # accepted, its relay waiting in the handshake
        began = time.monotonic()
        terminator.close()
        took = time.monotonic() - began
        assert [thread.name for thread in threading.enumerate() if thread not in before] == []
    assert took < PROMPT_S < JOIN_S


def test_sockets_handed_over_after_the_close_are_cut_at_once() -> None:
    relays = RelayThreads()
    listener = socket.create_server(("127.0.0.1", 0))
    relays.start(lambda: None)  # the accepting thread, ``close`` joins it first
    relays.close(listener)
    ours, theirs = socket.socketpair()
    with ours, theirs:
        relays.track(ours)  # a relay that finished its handshake as the close ran
        ours.settimeout(JOIN_S)
        assert ours.recv(1) == b""  # shut down: a pump on it ends rather than wait for good

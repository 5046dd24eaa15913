"""A valkey-server started from an aclfile, as a deployment starts its Redis (compose's ``--aclfile``).

``EmbeddedServer`` waits for an anonymous PING, which such a server refuses: its ``default`` user
has a password or is off. This one waits until the port answers at all, whatever the answer.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from service.embedded import find_server_binary
from service.ports import free_port

START_S = 30.0  # a bound against never on a loaded 2-core host, not a speed


def anonymous_ping(port: int) -> bytes:
    """The raw answer to a PING sent without logging in, once the server listens."""
    deadline = time.monotonic() + START_S
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as conn:
                conn.sendall(b"PING\r\n")
                return conn.recv(256)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@contextmanager
def aclfile_server(aclfile: Path, *flags: str) -> Iterator[int]:
    """The port of a fresh server started with ``--aclfile aclfile`` and ``flags``; stopped after."""
    port = free_port()
    listen = ["--port", str(port), "--bind", "127.0.0.1", "--dir", str(aclfile.parent), "--save", ""]
    args = [find_server_binary(), *listen, *flags, "--aclfile", str(aclfile)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        anonymous_ping(port)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)

"""A loopback port held for a Redis a test starts later, so no other process picks it in between.

Why. Some tests start a child pointed at a Redis that is not there yet (``serve`` and the pull
sidecar must answer their probes through an outage at start-up) and start the server on that port
only once the child has shown it. A port picked free (``service.ports.free_port``) and left unbound
for those seconds could be picked by another test's server, which would then answer the child, or
make ours fail to start. A port the kernel picks for the server (``bound_port``) does not help: the
child must be told the port before the server exists.

Held here, the port is bound by a socket of the test's own that does not listen: a connection to it
is refused, as to no server at all, and no picker takes it (``free_port``'s check binds it and
fails; the kernel's port-0 pick skips a bound port). Linux lets a second socket bind the same address
where both set ``SO_REUSEADDR`` and the first does not listen: valkey-server sets it, so the test's
server binds the held port and listens, and the hold is let go with the block.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterator
from contextlib import contextmanager

from service.ports import free_port

TRIES = 16  # picks before giving up: each one taken between free_port's check and the hold's bind


@contextmanager
def held_port() -> Iterator[int]:
    """A free loopback port, held (bound, not listening) for the block: a later valkey-server binds it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as hold:
        hold.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        for _ in range(TRIES):
            try:
                hold.bind(("127.0.0.1", free_port()))
                break
            except OSError as error:
                if error.errno != errno.EADDRINUSE:
                    raise
        else:
            raise AssertionError(f"{TRIES} free ports were each taken before they could be held")
        yield int(hold.getsockname()[1])

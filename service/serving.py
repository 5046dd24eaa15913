"""``serve``'s uvicorn server (``CountingServer``): uvicorn's own, whose handler also counts each stop
signal it hears with those ``serve``'s handler hears (``service.cli.heard_while_serving``).

Why. ``serve``'s handler (``service.cli.exit_cleanly``) ends the process at the third stop signal, as
its second's line says (``a third ends it now``); but from ``/readyz`` to uvicorn's end the signals
are uvicorn's (its graceful wait for requests in flight, a second SIGINT its force-quit), and uvicorn
raises them again as its run ends, where the first one's exit cut the rest: however many a user sent
during that wait, they were one. A Ctrl-C pressed three times there forced nothing, nor did a fourth,
and the exit ran its waits to the guard's bound (exit53). A user pressing it three times does not know
which handler heard the first: one count, whoever heard it.

Apart from ``service/commands/serve.py``, which imports no uvicorn before ``run`` (the command line
starts without it), and apart from ``service/cli.py``, light on purpose.
"""

from __future__ import annotations

import socket
from types import FrameType

import uvicorn
from uvicorn.config import STARTUP_FAILURE

from service.cli import heard_while_serving, served

__all__ = ["STARTUP_FAILURE", "CountingServer"]


class CountingServer(uvicorn.Server):
    """``uvicorn.Server`` whose stop signals count toward ``serve``'s third."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """uvicorn's own (the graceful stop, its force-quit at a second SIGINT), then the count: the
        second is logged, the third ends the process (``exit_guard.force``)."""
        super().handle_exit(sig, frame)
        heard_while_serving(sig)

    def run(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's run, then no replay of what it heard is awaited any more (``service.cli.served``):
        a run its startup's failure ended raises, and raises again nothing it heard."""
        try:
            super().run(sockets)
        finally:
            served()

"""``serve``'s uvicorn server (``CountingServer``): uvicorn's own, whose handler also counts each stop
signal it hears with those ``serve``'s handler hears (``service.cli.heard_while_serving``).

Why. ``serve``'s handler (``service.cli.exit_cleanly``) ends the process at the third stop signal, as
its second's line says (``a third ends it now``); but from ``/readyz`` to uvicorn's end the signals
are uvicorn's (its graceful wait for requests in flight, a second SIGINT its force-quit), and uvicorn
raised them again as its run ended, where the first one's exit cut the rest: however many a user sent
during that wait, they were one. A Ctrl-C pressed three times there forced nothing, nor did a fourth,
and the exit ran its waits to the guard's bound (exit53). A user pressing it three times does not know
which handler heard the first: one count, whoever heard it.

Nor does it raise them again as its run ends (``capture_signals``): that replay was one more signal to
``serve``'s handler, which took it for the first and began the exit (``SystemExit(0)``), so one a user
sent between uvicorn's putting the handler back and its replay was taken for that replay instead, and
counted by no one (review54). The run returns; ``serve``'s exit follows its return, as it followed the
replay's ``SystemExit(0)``, to the same status, 0.

Apart from ``service/commands/serve.py``, which imports no uvicorn before ``run`` (the command line
starts without it), and apart from ``service/cli.py``, light on purpose.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
from collections.abc import Iterator
from types import FrameType

import uvicorn
from uvicorn.config import STARTUP_FAILURE
from uvicorn.server import HANDLED_SIGNALS

from service.cli import exit_begun, heard_while_serving

__all__ = ["STARTUP_FAILURE", "CountingServer"]


class CountingServer(uvicorn.Server):
    """``uvicorn.Server`` whose stop signals count toward ``serve``'s third."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """uvicorn's own (the graceful stop, its force-quit at a second SIGINT), then the count: the
        second is logged, the third ends the process (``exit_guard.force``)."""
        super().handle_exit(sig, frame)
        heard_while_serving(sig)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's own; one that fails (``SystemExit(3)``: the app's startup failed) begins the exit
        (``service.cli.exit_begun``) before uvicorn puts ``serve``'s handler back: a stop signal then,
        as the failure unwinds the run, was the first to that handler, whose ``SystemExit(0)`` took the
        place of the 3 (a replica that never served read as a stop in order)."""
        try:
            await super().startup(sockets)
        except BaseException:
            exit_begun()
            raise

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """uvicorn's own, less its replay: its handlers (``handle_exit``) while it serves, then the ones
        it found put back. Each signal it heard was counted then, and began the stop its run has ended
        by: raised again, a signal that came between the handlers' return and the replay was taken for
        the replay (the exit's start) and counted nowhere, so a user's third forced nothing."""
        if threading.current_thread() is not threading.main_thread():  # as uvicorn: no handler there
            yield
            return
        found = {signum: signal.signal(signum, self.handle_exit) for signum in HANDLED_SIGNALS}
        try:
            yield
        finally:
            for signum, handler in found.items():
                signal.signal(signum, handler)

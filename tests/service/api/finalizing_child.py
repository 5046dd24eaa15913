"""A process with ``serve``'s stop handlers and exit guard whose exit hears its second stop signal
during an ``atexit`` wait and its third in the interpreter's finalization, for
``test_exit_finalizing.py``: the window landed in every time.

Run as ``python -m tests.service.api.finalizing_child SIGNAL`` (``SIGTERM``, ``SIGINT``: the third).
The first SIGTERM starts the exit (``exit_cleanly``'s ``SystemExit(0)``); the second is sent by an
``atexit`` hook run before the guard decides the status (registered after the guard's import, so run
before its hook), as a wait of the service's would hear it; the third by an object this module holds,
collected as the interpreter clears the modules, after every ``atexit`` hook, once it has restored
each handled signal's default action. The object then writes the handler Python had for the third
(None: Python handles it no more) to stdout, which only a process still alive does.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys

from service import cli
from service.api import exit_guard

ALIVE = "alive after the third stop signal, its handler then"


class _Third:
    """Sends the third stop signal as it is collected; holds what it calls, the modules being cleared."""

    def __init__(self, signum: signal.Signals) -> None:
        self.signum = signum
        self.pid = os.getpid()
        self.kill, self.write, self.getsignal = os.kill, os.write, signal.getsignal

    def __del__(self) -> None:
        handler = self.getsignal(self.signum)
        self.kill(self.pid, self.signum)
        self.write(1, f"{ALIVE} {handler!r}\n".encode())


def _second() -> None:
    """One of the exit's waits, during which the second stop signal comes (its handler runs here)."""
    os.kill(os.getpid(), signal.SIGTERM)
    signal.getsignal(signal.SIGTERM)  # a line of Python after the kill: the handler has run by its end


_held: list[_Third] = []  # cleared with this module's globals, in the finalization


def main() -> None:
    """``serve``'s handlers and guard, the second's hook and the third's object; then the first."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, cli.exit_cleanly)
    exit_guard.enable()
    atexit.register(_second)
    _held.append(_Third(signal.Signals[sys.argv[1]]))
    os.kill(os.getpid(), signal.SIGTERM)


if __name__ == "__main__":
    main()

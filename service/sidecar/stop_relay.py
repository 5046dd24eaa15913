"""Push mode's SIGTERM and SIGINT, relayed to its event loop by handlers of the process's own: never
put back to their defaults while the command still runs.

Why not ``loop.add_signal_handler``. asyncio's loop puts both signals back to their defaults as it
closes (``remove_signal_handler`` sets ``SIG_DFL``, or ``default_int_handler`` for SIGINT, for each
it holds: CPython 3.11 to 3.14 alike), and ``asyncio.run`` closes it after the run, returned or
raised, before the command could ignore them. A stop signal then (an operator's second ``kill``, a
stream of them) killed the process by the signal: -15 and no counters line after a run that returned
(chaos9's soak), -15 in place of exit 70 or 2 after one that raised (a loop's death, a Redis too old).
The earlier fix (``early_stop.deaf_after_run``) took them out of the loop's private registry
(``loop._signal_handlers``); no public call takes a handler off a loop without the default.

So the relay is the loop's own mechanism without the reset, on public calls only: a Python handler
that does nothing (the signal's default action never runs) and the interpreter's wakeup fd, a byte
per signal, on a socket pair the loop reads (``add_reader``), which hands each stop signal to the
run. However the block ends, both signals are left ignored in the console script's process (its
exit follows: the command's own status, 0, 2 or 70, and never a death by the signal; an ignored
signal stays ignored through the interpreter's teardown), or as they were found in a caller's own
process (a test's ``CliRunner``), which keeps hearing Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from service.sidecar.early_stop import STOP_SIGNALS


@contextlib.contextmanager
def relayed(loop: asyncio.AbstractEventLoop, on_signal: Callable[[], None], deaf: bool) -> Iterator[None]:
    """SIGTERM and SIGINT call ``on_signal`` on ``loop`` (once each) inside the block; on the way
    out, returned or raised, they are ignored (``deaf``: the console script's process) or given back
    the handlers found. Main thread only, as every signal handler is."""
    receive, send = socket.socketpair()
    found = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    with receive, send:
        for end in (receive, send):
            end.setblocking(False)
        wakeup_found = signal.set_wakeup_fd(send.fileno(), warn_on_full_buffer=False)
        try:
            loop.add_reader(receive.fileno(), _read, receive, on_signal)
            try:
                for sig in STOP_SIGNALS:  # after the wakeup fd: from its first one, a signal is read
                    signal.signal(sig, _heard)
                    signal.siginterrupt(sig, False)  # as the loop's own: fewer interrupted calls
                yield
            finally:
                for sig, handler in found.items():  # never through the default: see the module
                    signal.signal(sig, signal.SIG_IGN if deaf else settable(handler))
                loop.remove_reader(receive.fileno())
        finally:
            signal.set_wakeup_fd(wakeup_found)


def _read(receive: socket.socket, on_signal: Callable[[], None]) -> None:
    """What the wakeup fd got: one byte per signal, its number; other signals' bytes are skipped."""
    with contextlib.suppress(BlockingIOError, InterruptedError):
        for signum in receive.recv(4096):
            if signum in STOP_SIGNALS:
                on_signal()


def _heard(signum: int, frame: FrameType | None) -> None:
    """The Python handler: the work is the loop's (the wakeup fd), and the default action never runs."""
    del signum, frame


def settable(handler: Any) -> Any:
    """A handler ``signal.signal`` takes back: one not installed from Python (None) reads as the
    default, the most that can be restored of it."""
    return signal.SIG_DFL if handler is None else handler

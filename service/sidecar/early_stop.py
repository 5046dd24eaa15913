"""A SIGTERM or SIGINT that reaches the sidecar before its run handles them: exit 0, nothing held.

Why. The run's own handlers (push mode's relay to its loop, pull mode's uvicorn) exist only once it runs.
Before them (the command's imports, the flags checked, a Redis Cluster waited for at start-up with
the liveness probe answering, the engine client built) a SIGTERM killed the process by its default
action: status -15, which a shell and Kubernetes' container status show as 143 ("Error"), read as
a crash, for a sidecar that had claimed nothing; a Ctrl-C ended it with status 130. A stop
asked that early is done at once, as one asked later is done once drained: the counters line (all
zero) and exit status 0, a clean stop to Kubernetes ("Completed") and to systemd alike. An exit 143
by hand would not be: systemd counts a death by SIGTERM as clean, but exit status 143 as a failure
unless the unit lists it in ``SuccessExitStatus``.

The console script's entry (``service.cli.main``) arms them before it imports the command line
(Typer, every command group: 0.6-0.8 s on the 2-core dev host), and the command again as its first
line; what is left is the interpreter's own start (20-40 ms on that host at load 7, 200-300 ms at
load 15-18: docs/sidecar.md), when a SIGTERM still ends the process by the signal.

Only the console script's process is given these handlers (``commands/sidecar._owns_process``), as
only it is made deaf to the stop signals once the command owns its exit (push mode's
``stop_relay``, the command's ``_deaf_to_stop_signals``): a caller running the command in its own
process keeps its own.
"""

from __future__ import annotations

import signal
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StoppedBeforeRunError(SystemExit):
    """A stop signal before the run's handlers. A ``SystemExit`` (status 0): no ``except Exception``
    on its way out swallows it (the wait for a cluster retries on errors), asyncio re-raises it from
    a callback rather than logging it, and a process it reaches uncaught still exits 0, silently."""

    def __init__(self, signum: int) -> None:
        super().__init__(0)
        self.signal_name = signal.Signals(signum).name


def arm() -> None:
    """Have SIGTERM and SIGINT raise ``StoppedBeforeRunError`` until the run installs its own
    handlers (push mode's ``stop_relay``, pull mode's ``launch._pull_server``). The
    command's first act, in the console script's process only."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, _stopped)


def armed() -> bool:
    """Whether both stop signals still have the early handlers (``arm``): the console script's
    process, its run not begun."""
    return all(signal.getsignal(sig) is _stopped for sig in STOP_SIGNALS)


def _stopped(signum: int, frame: FrameType | None) -> None:
    """The handler: ignore both signals from now (a second one lands in an exit already under way,
    as after a run), then unwind whatever the start was doing."""
    del frame
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise StoppedBeforeRunError(signum)

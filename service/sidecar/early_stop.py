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

A refusal decides the exit (2 for a refused flag, a taken port, a Redis that refuses us or is too
old; 70 for a loop's death), and a stop signal landing between its raise and the command's
``except`` (in a ``finally`` on its way out: the push health server's stop, a poll of up to 50 ms)
met these handlers, which raised over it: exit 0 and a clean stop's zero counters line in place of
the refusal (signals46's gap). So the command names the exceptions that decide its exit
(``deciding``): one of them in flight, a stop signal changes nothing, and once one leaves the block
both signals are ignored, with no call in between where a handler could run.

Any other exception in flight holds the stop (``held``) rather than raising over it: it may be a bug
on its way out (its traceback and exit 1, ``commands/sidecar._serve``, were replaced by a stop's exit 0
and zero counters: review47c's gap), or one a library handles and drops, after which the start goes
on and the run, once its own handlers are in, stops at once for the stop held (``launch``). The one
wait of the start that sleeps while it handles an error, the cluster's (``built_when_reachable``),
sleeps through ``pause``, where a stop held or landing is raised at once: the wait stays stoppable
(helper sidecar48).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from collections.abc import Iterator
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_deciding: list[tuple[type[BaseException], ...]] = []  # the kinds of each ``deciding`` block entered
_held: list[int] = []  # stop signals that met an exception in flight (``held``)
_pausing: list[bool] = []  # non-empty while a wait of the start sleeps between its tries (``pause``)


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
    command's first act, in the console script's process only. Armed already (the console script's
    entry arms them before the command line's imports), a stop held since is kept: it came in those
    imports, and the command's arm cleared it, so the run never stopped for it (chaos12's soak)."""
    if not armed():
        _held.clear()  # a stop held by an earlier command in this process (a test's) is not this one's
    for sig in STOP_SIGNALS:
        signal.signal(sig, _stopped)


def armed() -> bool:
    """Whether both stop signals still have the early handlers (``arm``): the console script's
    process, its run not begun."""
    return all(signal.getsignal(sig) is _stopped for sig in STOP_SIGNALS)


@contextlib.contextmanager
def deciding(*kinds: type[BaseException]) -> Iterator[None]:
    """Inside the block, an exception of ``kinds`` decides the command's exit: a stop signal that
    meets one in flight (its ``finally`` blocks, the command's ``except``) changes nothing, and one
    leaving the block leaves both signals ignored where these handlers were in (``armed``). Name
    only what nothing in the block catches and retries: a stop met while such an error is handled
    (the cluster wait's ``except`` sleeps) would be lost, the process deaf."""
    _deciding.append(kinds)
    try:
        yield
    except kinds:
        if armed():
            _deaf()
        raise
    finally:
        _deciding.pop()


def held() -> bool:
    """Whether a stop signal met an exception in flight that decided nothing (``_stopped``) since
    ``arm``: the run, once its own handlers are in, stops at once for it (push mode's relay, pull
    mode's server). Asked only where ``armed`` was true: the console script's process."""
    return bool(_held)


def pause(seconds: float) -> None:
    """A wait's sleep between its tries at start (``built_when_reachable``'s: in the ``except`` of
    the try that failed): a stop held while it handled that error, or one landing in the sleep, stops
    the start now (``StoppedBeforeRunError``) rather than being held through a wait that may not end."""
    _pausing.append(True)
    try:
        if _held and armed():
            _deaf()
            raise StoppedBeforeRunError(_held[0])
        time.sleep(seconds)
    finally:
        _pausing.pop()


def _deciding_now() -> bool:
    """Whether the exception being handled (``sys.exception``) decides the exit (``deciding``)."""
    in_flight = sys.exception()
    return in_flight is not None and any(isinstance(in_flight, kinds) for kinds in _deciding)


def _deaf() -> None:
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def _stopped(signum: int, frame: FrameType | None) -> None:
    """The handler: ignore both signals from now (a second one lands in an exit already under way,
    as after a run) and unwind whatever the start was doing; an exit the command decided unwinding it
    already (``deciding``) is left alone, and any other exception in flight holds the stop (``held``):
    unwound, it is the exit's (a bug's traceback, exit 1), and handled and dropped, the run's."""
    del frame
    if sys.exception() is not None and not _pausing and not _deciding_now():
        _held.append(signum)
        return
    _deaf()
    if not _deciding_now():
        raise StoppedBeforeRunError(signum)

"""A replica's exit ends within its bound after the app's stop, whatever a thread still waits for.

Why. Each wait of the stop is bounded (``service/app.py``'s ``_stop``, the exit's settles), but the
process's exit also joins every thread that is no daemon, and a planning thread (anyio's workers are
not daemons: ``service/api/plan_thread.py``) inside a Redis call when the stop comes ends that call
first: a publish under way, the step of its bookkeeping under way, a retry's first answer. On a Redis
Cluster whose every master stalls, measured at a 1 s command timeout: a plain command 4 timeouts, a
one-slot pipeline 5, the announce's pipeline over several slots 7 (stop49, docs/experiments.md), past
the documented 10 s + 3 timeouts; a call that Redis never answers held the exit until the kubelet's
SIGKILL.

How. ``serve`` enables the guard; the app's stop arms it (``arm``): a daemon that, once the bound has
passed, logs the threads still running, flushes the log, runs the last acts ``serve`` gave it (within
``LAST_ACTS_S``) and ends the process (``os._exit``) with ``FORCED_STATUS``. What that cuts is what the
kubelet's SIGKILL would have cut later: a Lua call under way runs whole or not at all on Redis,
whatever became of its client; a take-back or bookkeeping not done lapses with its TTL
(docs/operations.md, "Shutdown"). An app run in the test process (``TestClient``) never enables it.

What ``os._exit`` skips, and what is done instead (stop50). The guard fires while the main thread
waits on a thread (the interpreter's join, before any ``atexit`` callback), on an ``atexit`` wait, or
on the embedded server's stop (``after_the_waits``: after those, review52a). Skipped: the ``atexit``
waits for the give-ups' take-backs and the bookkeeping (``plan_thread``, ``mark_hop``,
``post_publish``), which wait on the Redis that hung, and whose work lapses with its TTL;
``logging.shutdown``, whose flush the guard does (every logger of ours writes through the root's one
handler: ``service.logs``); what is left of the embedded server's stop. Its wait for a stalled server
(``STOP_S``) outlasted the bound with its watcher already disarmed, and the server ran on for good:
``serve``'s last act ends it (``embedded.end_all_now``). No metrics files (the registry lives in
memory), no child process but the embedded server and its watcher.

The status. Not 0: an ordinary stop never meets the guard (its waits end within ``STOP_TIMEOUTS``),
so a forced exit is always a stop that hung, and its status says so where the WARNING is not read
(systemd marks the unit failed, a pod's container shows ``Error``; neither restarts a unit or pod it
stopped). 70, as a sidecar whose loop died; a SIGKILL at the grace period's end would have said 137.
Decided once, after the exit's last ``atexit`` wait (``_at_the_exits_end``): a guard that has fired
by then ends the process with it, one that has not ends nothing. Past that point the interpreter
finalizes, where no daemon runs: a guard firing there, or firing earlier and still at its last acts
when the main thread got there, left the exit its 0 (exit51, docs/experiments.md). Whether the bound
has passed is the clock's word (``_deadline``), not whether the guard's thread has woken: on a loaded
host it woke late, the embedded server's stop of a stalled server (``STOP_S`` from the stop's start,
tens of ms after the bound's) ended first by its SIGKILL, and the exit ended 0 or 70 by the host's load
(review52a). An exit whose last wait ends past its deadline ends as the guard would have.

A third stop signal (exit52). ``serve``'s handler (``service.cli.exit_cleanly``) starts the exit at
the first signal it hears and only logs the second; a second that raised again cut whatever the exit
was waiting on (the join of a thread stuck on Redis, the embedded server's stop, this module's
decision), and the process ended 0 before its bound, a server orphaned where a third cut its stop
again. The third (counted with those uvicorn heard during its wait: ``service/serving.py``, exit53) is
the user's word that the exit may be cut: ``force`` ends the process now as a
passed bound does, its WARNING (``SIGNALLED_LOG``), its last acts, ``FORCED_STATUS``; a guard fired
already, or an exit decided already, is left to end as it does. From that decision on, SIGINT and
SIGTERM are ignored (``_keep_the_status``): in the interpreter's finalization after the ``atexit``
hooks, where Python handles no signal, one killed the process by it (-15, -2) whatever had been
decided (exit54).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence

EXIT_LOG = "the exit passed its bound after the stop: ending the process"
SIGNALLED_LOG = "a third stop signal during the exit: ending the process"
# What an act that raised is said to be, by the list it was in: an act run after the exit's waits
# (``after_the_waits``: the embedded server's stop) is no part of a forced exit, and was logged as one.
AFTER_THE_WAITS_FAILED = "an act after the exit's waits failed"
LAST_ACT_FAILED = "a last act of the forced exit failed"
# The status of an exit the guard forced: not 0, which says the stop ended in order, but the one a
# sidecar whose loop died exits with (sysexits' EX_SOFTWARE): something hung, as a SIGKILL's 137 would say.
FORCED_STATUS = 70
# The least bound: the guard is there for a wait with no end, not to race an exit under way (the
# embedded server's stop, the interpreter's) on a loaded host at a short command timeout.
MIN_BOUND_S = 5.0
# The most the last acts may take past the bound (the embedded server's SIGKILL and dir: milliseconds).
LAST_ACTS_S = 1.0
_log = logging.getLogger("service.shutdown")
# reentrant: ``force`` runs in a signal handler, on the main thread, which may hold it already
_lock = threading.RLock()
_enabled = False
_armed: threading.Thread | None = None
_last_acts: tuple[Callable[[], None], ...] = ()
_fired = threading.Event()  # the bound passed: the process ends with ``FORCED_STATUS``
_exited = False  # the exit's last wait ended first (``_at_the_exits_end``): the guard ends nothing
_after_the_waits: list[Callable[[], None]] = []  # what ``_at_the_exits_end`` runs first (``after_the_waits``)
_bound_s = 0.0  # the bound ``arm`` set
_deadline: float | None = None  # when it passes (``time.monotonic``); None until armed


def enable(last_acts: Sequence[Callable[[], None]] = ()) -> None:
    """Let ``arm`` end this process: only ``serve``, which owns it, calls this. ``last_acts``: what must
    still be done when the exit is forced, each quick (the embedded server's end)."""
    global _enabled, _last_acts
    with _lock:
        _enabled = True
        _last_acts = tuple(last_acts)


def enabled() -> bool:
    """Whether ``serve`` enabled the guard, whose decision then ignores the stop signals once its exit's
    waits and stop are done (``_keep_the_status``): the console script's own last hook leaves them to it
    (``service.cli.main``), which may run before this one's where the service's modules came first."""
    return _enabled


def after_the_waits(act: Callable[[], None]) -> None:
    """Run ``act`` at the process's exit after every wait the service registers there, before the
    status is decided: the embedded server's stop (``serve``). Stopped as ``serve``'s command
    returned, it was gone for the work the exit still waits for, started after the app stopped (a
    give-up's take-back, a step's bookkeeping: ``plan_thread``, ``mark_hop``, ``post_publish``), and
    for a planning thread the interpreter still joins, whose step's publish met ``Connection
    refused`` (review52a). Run here, within the guard's bound: a stop that hangs is the guard's."""
    _after_the_waits.append(act)


def _at_the_exits_end() -> None:
    """The interpreter's last ``atexit`` wait done: decide the status here, once. A guard that has
    fired ends the process (its ``os._exit`` within its last acts, else this one): a last act can let
    the main thread go on (the embedded server it waited for is gone), and a service's wait can end
    while the guard runs its acts; either exit went on to the interpreter's finalization, where the
    guard's daemon can no longer run, and ended 0 (review50c, exit51). A guard that has not fired
    never will: the exit's waits ended within its bound, and 0 is the truth. Registered as this module
    is imported, before the service's own waits (``service/api/settling.py`` imports it first), so it
    runs after them: Python runs ``atexit`` hooks last registered first. A bound that has passed by
    the clock ends the process here though its guard has not woken: the status is the bound's, not
    the host's load's (review52a)."""
    global _exited
    _run(_after_the_waits, AFTER_THE_WAITS_FAILED)
    with _lock:
        _exited = True
        passed = _deadline is not None and not _fired.is_set() and time.monotonic() >= _deadline
        if passed:  # its guard has not woken yet: it would have, on an idle host
            _fired.set()
        fired = _fired.is_set()
    guard = _armed
    if passed:
        _end(EXIT_LOG, {"bound_s": _bound_s})
    elif fired and guard is not None:
        guard.join(LAST_ACTS_S + 1.0)  # its ``os._exit`` ends the process here
        os._exit(FORCED_STATUS)
    elif _enabled:
        _keep_the_status()


def _keep_the_status() -> None:
    """The status decided (the exit's waits ended within the bound: 0, or the exit's own, ``serve``'s
    3 where it never served): ignore SIGINT and SIGTERM from here to the process's end, so that no stop
    signal changes it. After the ``atexit`` hooks the interpreter restores the default action of every
    signal it handled (``_PySignal_Fini``) and tears its modules down, 1.2-2.2 s for ``serve``'s on
    the 2-core host at load 13-27 (a bare interpreter's, 20-80 ms): a third stop signal landing there
    (a user's Ctrl-C, a supervisor's second SIGTERM) killed the process by the signal, -15 (143) or
    -2 (130), a crash's status where the third is documented to force 70 and a decided exit to end as
    decided (exit54). An ignored signal stays ignored through that restore. Not forced at a third:
    the waits are all done, the server stopped, and only the interpreter's teardown is left; nor ended
    here with ``os._exit``, which would skip that teardown's hooks (those registered before this
    module's) and cannot know the status the interpreter holds (3, a ``serve`` that never served).
    The cost: a teardown that hangs is ended by SIGKILL alone (the kubelet's, systemd's at their
    timeouts). Only on the main thread, which runs the ``atexit`` hooks (a handler is set there only)."""
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)


atexit.register(_at_the_exits_end)


def arm(bound_s: float) -> threading.Thread | None:
    """At the app's stop: end the process ``bound_s`` (``MIN_BOUND_S`` at least) from now unless it has
    exited by then; the guard's daemon (None where ``serve`` did not enable it). Idempotent: the first
    stop's bound holds."""
    global _armed, _bound_s, _deadline
    with _lock:
        if not _enabled or _armed is not None:
            return _armed
        _bound_s = max(bound_s, MIN_BOUND_S)
        _deadline = time.monotonic() + _bound_s
        _armed = threading.Thread(target=_end_after, args=(_bound_s,), name="exit-guard", daemon=True)
        _armed.start()
        return _armed


def force(signal_name: str) -> None:
    """A third stop signal (``signal_name``) during the exit: end the process now, as a passed bound
    does (``SIGNALLED_LOG``). Nothing where the exit's status is decided already: the guard has fired
    (it ends the process within its last acts) or the exit's last wait has ended (it ends 0)."""
    with _lock:
        if _exited or _fired.is_set():
            return
        _fired.set()
    _end(SIGNALLED_LOG, {"signal": signal_name})


def _end_after(bound_s: float) -> None:
    """Sleep ``bound_s``, then end the process (``_end``)."""
    time.sleep(bound_s)
    with _lock:
        if _exited:  # the exit's waits all ended within the bound: its status stands
            return
        _fired.set()
    _end(EXIT_LOG, {"bound_s": bound_s})


def _end(message: str, extra: dict[str, object]) -> None:
    """Name what still runs (threads no daemon, the main one aside) in ``message``'s WARNING, run the
    last acts within ``LAST_ACTS_S`` and end with ``FORCED_STATUS``."""
    waited = sorted(
        t.name for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()
    )
    _log.warning(message, extra={**extra, "threads": waited, "status": FORCED_STATUS})
    _flush()
    acts = threading.Thread(
        target=_run, args=(_last_acts, LAST_ACT_FAILED), name="exit-guard-last-acts", daemon=True
    )
    acts.start()
    acts.join(LAST_ACTS_S)
    _flush()
    os._exit(FORCED_STATUS)


def _run(acts: Sequence[Callable[[], None]], failed: str) -> None:
    """Each of ``acts`` in turn; one that raises is logged as ``failed`` says what it was (a last act,
    an act after the waits: one message for both told an ordinary exit's failed stop as a forced
    exit's), and the next runs."""
    for act in acts:
        try:
            act()
        except Exception:
            _log.exception(failed)


def _flush() -> None:
    """Flush the root's handlers, which every logger of the service writes through (``service.logs``).
    One that raises (a stderr whose reader is gone: ``BrokenPipeError``) is passed over: raised, it
    ended the guard's thread before its ``os._exit``, and the exit hung (review50c)."""
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(Exception):
            handler.flush()

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
passed, logs the threads still running and ends the process (``os._exit``) with a stop's status, 0.
What that cuts is what the kubelet's SIGKILL would have cut later: a Lua call under way runs whole or
not at all on Redis, whatever became of its client; a take-back or bookkeeping not done lapses with
its TTL (docs/operations.md, "Shutdown"). An app run in the test process (``TestClient``) never
enables it.
"""

from __future__ import annotations

import logging
import os
import threading
import time

EXIT_LOG = "the exit passed its bound after the stop: ending the process"
# The least bound: the guard is there for a wait with no end, not to race an exit under way (the
# embedded server's stop, the interpreter's) on a loaded host at a short command timeout.
MIN_BOUND_S = 5.0
_log = logging.getLogger("service.shutdown")
_lock = threading.Lock()
_enabled = False
_armed: threading.Thread | None = None


def enable() -> None:
    """Let ``arm`` end this process: only ``serve``, which owns it, calls this."""
    global _enabled
    with _lock:
        _enabled = True


def arm(bound_s: float) -> threading.Thread | None:
    """At the app's stop: end the process ``bound_s`` (``MIN_BOUND_S`` at least) from now unless it has
    exited by then; the guard's daemon (None where ``serve`` did not enable it). Idempotent: the first
    stop's bound holds."""
    global _armed
    with _lock:
        if not _enabled or _armed is not None:
            return _armed
        _armed = threading.Thread(
            target=_end_after, args=(max(bound_s, MIN_BOUND_S),), name="exit-guard", daemon=True
        )
        _armed.start()
        return _armed


def _end_after(bound_s: float) -> None:
    """Sleep ``bound_s``, then name what still runs (threads no daemon, the main one aside) and end."""
    time.sleep(bound_s)
    waited = sorted(
        t.name for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()
    )
    _log.warning(EXIT_LOG, extra={"bound_s": bound_s, "threads": waited})
    for handler in logging.getLogger().handlers:
        handler.flush()
    os._exit(0)

"""Threads that a replica's stop waits for, for one command timeout at most, before it cuts them.

These are the Redis calls that a give-up starts as the service shuts down (``plan_thread``: a
request given up while it waited for a planning thread takes back its in-flight mark). Such a thread
is a daemon. A plain thread held the process's exit while a stalled Redis timed its call out three
times (its retries).

Each thread is waited for in two places:
- as the app stops, before its Redis pool is closed under it. When redis-py's parser had its
  connection closed mid-reply it raised ``AttributeError``: a traceback, and the mark was left.
- at the process's exit (``atexit``), for threads started after the app stopped.

A thread still running at the end of the wait is cut: logged once, and not waited for again. What
it was writing is left to lapse with its key's TTL, as a dead replica's is. A thread that Redis
answers within the timeout is never cut.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

_log = logging.getLogger("service.pipeline")


class Settling:
    """Daemon threads started through ``start``, and how long ``settle`` waits for them: the longest
    command timeout named so far (a process serves one app, so it names one)."""

    def __init__(self, what: str) -> None:
        """``what``: what the threads do, named in the log line when some are cut."""
        self.what = what
        self.bound_s = 0.0
        self._lock = threading.Lock()
        self._running: set[threading.Thread] = set()

    def start(self, target: Callable[[], None], name: str) -> None:
        """Run ``target()`` on a daemon thread that ``settle`` waits for."""
        thread = threading.Thread(target=self._run, args=(target,), name=name, daemon=True)
        with self._lock:
            self._running.add(thread)
        thread.start()

    def _run(self, target: Callable[[], None]) -> None:
        try:
            target()
        finally:
            with self._lock:
                self._running.discard(threading.current_thread())

    def settle(self, timeout_s: float = 0.0, left_s: float | None = None) -> int:
        """Wait for the running threads for ``timeout_s``, or the longest timeout named before (what
        ``atexit`` waits, naming none); at most ``left_s`` where given (what is left of a stop's
        window). Return how many were cut: those still running then, logged and not waited for
        again."""
        with self._lock:
            self.bound_s = bound_s = max(self.bound_s, timeout_s)
            running = list(self._running)
        until = time.monotonic() + (bound_s if left_s is None else min(bound_s, left_s))
        for thread in running:
            thread.join(max(0.0, until - time.monotonic()))
        with self._lock:
            cut = [thread for thread in running if thread in self._running]
            self._running.difference_update(cut)
        if cut:
            _log.warning("%s cut at shutdown: left to lapse", self.what, extra={"count": len(cut)})
        return len(cut)

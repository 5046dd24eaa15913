"""Threads that a replica's stop waits for, for one command timeout at most, before it cuts them.

These are the Redis calls that a give-up starts as the service shuts down (``plan_thread``: a
request given up while it waited for a planning thread takes back its in-flight mark;
``mark_hop``: a handler cancelled during or after its mark's write takes the mark back), and the
mark's write itself, under way on a thread of the shared pool (``Settling.under_way``). Such a thread
is a daemon. A plain thread held the process's exit while a stalled Redis timed its call out three
times (its retries).

Each thread is waited for in two places:
- as the app stops, before its Redis pool is closed under it. When redis-py's parser had its
  connection closed mid-reply it raised ``AttributeError``: a traceback, and the mark was left.
- at the process's exit (``atexit``), for threads started after the app stopped.

The exit's waits run before the exit guard decides the process's status (``exit_guard``'s own
``atexit`` hook, registered as it is imported: here, before any module registers its wait), so a guard
whose bound passes during them still ends the process with its status.

A thread still running at the end of the wait is cut: logged once, and not waited for again. What
it was writing is left to lapse with its key's TTL, as a dead replica's is. A thread that Redis
answers within the timeout is never cut.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# imported first for its ``atexit`` hook, which must run after every wait registered by this module's users
from service.api import exit_guard  # noqa: F401

_log = logging.getLogger("service.pipeline")


class Settling:
    """The calls under way on Redis that a stop waits for: daemon threads started through ``start``,
    and work that runs on a thread of someone else's (``under_way``: the shared pool's, which the
    app cannot make a daemon); and how long ``settle`` waits for them, the longest command timeout
    named so far (a process serves one app, so it names one)."""

    def __init__(self, what: str) -> None:
        """``what``: what the threads do, named in the log line when some are cut."""
        self.what = what
        self.bound_s = 0.0
        self._changed = threading.Condition()
        self._running: set[object] = set()

    def start(self, target: Callable[[], None], name: str, bound_s: float = 0.0) -> None:
        """Run ``target()`` on a daemon thread that ``settle`` waits for; ``bound_s``: the command
        timeout of the Redis it calls, where the caller knows it (the longest one is waited)."""
        thread = threading.Thread(target=self._run, args=(target,), name=name, daemon=True)
        with self._changed:
            self.bound_s = max(self.bound_s, bound_s)
            self._running.add(thread)
        thread.start()

    def _run(self, target: Callable[[], None]) -> None:
        try:
            target()
        finally:
            self._done(threading.current_thread())

    @contextmanager
    def under_way(self) -> Iterator[None]:
        """Have ``settle`` wait for the block, run on the caller's thread; a thread ``start``-ed in
        it is waited for before the block counts as ended, so no settle sees a gap between them."""
        token = object()
        with self._changed:
            self._running.add(token)
        try:
            yield
        finally:
            self._done(token)

    def handed_on(self, target: Callable[[], None]) -> Callable[[], None]:
        """``target``, for a thread of someone else's to run, waited for from now: a settle that
        comes before that thread picks it up waits for it too (cut, if it never runs)."""
        token = object()
        with self._changed:
            self._running.add(token)

        def run() -> None:
            try:
                target()
            finally:
                self._done(token)

        return run

    def _done(self, token: object) -> None:
        with self._changed:
            self._running.discard(token)
            self._changed.notify_all()

    def settle(self, timeout_s: float = 0.0, left_s: float | None = None) -> int:
        """Wait until nothing is running, for ``timeout_s``, or the longest timeout named before (what
        ``atexit`` waits, naming none); at most ``left_s`` where given (what is left of a stop's
        window). What starts during the wait is waited for too, in the same bound (a take-back that a
        thread under way hands on). Return how many were cut: those still running then, logged and
        not waited for again."""
        with self._changed:
            self.bound_s = bound_s = max(self.bound_s, timeout_s)
            until = time.monotonic() + (bound_s if left_s is None else min(bound_s, left_s))
            while self._running and (wait_s := until - time.monotonic()) > 0:
                self._changed.wait(wait_s)
            cut = len(self._running)
            self._running.clear()
        if cut:
            _log.warning("%s cut at shutdown: left to lapse", self.what, extra={"count": cut})
        return cut

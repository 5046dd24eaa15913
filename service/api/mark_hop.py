"""``POST /schedule``'s hop to the shared thread pool that writes its in-flight mark, taken back even
when the handler is cancelled during it.

The mark is a Redis call, made on a thread (``service/api/schedules.py``: ~50 us, more behind a busy
GIL). A handler cancelled the native way meanwhile (uvicorn's graceful-shutdown timeout;
``asyncio.run`` cancelling the tasks left once uvicorn returns) got its ``CancelledError`` at once,
while the thread wrote the mark on; nothing took it back, so it lapsed only after the plan queue's
timeout + the budget + 60 s, as a dead replica's does, and a DELETE meanwhile answered 202
``withdrawn`` for a step nobody planned any more (a retry of the POST was not refused: each request
holds its own entry, and the retry's publish deletes the key). Now whichever comes last, the write or
the give-up, takes the mark back, decided under a lock (``_Hop``) as ``plan_thread._Start`` decides
plan or take-back; a thread that starts after the give-up writes nothing.

The give-up's own take-back thread is a daemon, waited for one command timeout at most as the app
stops and at the process's exit (``settle``; ``serve`` runs the app in its main process). A handler
is given up at the service's shutdown, so that thread runs as the process ends: a plain thread held
the exit while a stalled Redis timed it out three times (its retries, ~3 s by default), a daemon not
waited for could lose a take-back a healthy Redis answers in microseconds, and one still running as
the app closed its Redis pool had its connection closed mid-reply (redis-py's parser raised
``AttributeError``, not a Redis error: a traceback, and the mark could be left). What a take-back
cut then loses: its mark was written and extended (``in_flight.mark``), so it lapses with its
request's TTL (the plan queue's timeout + the budget + 60 s), as a dead replica's does, a DELETE
meanwhile answering 202 ``withdrawn``; a take-back not answered within a timeout was most likely
lost with its first try anyway.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import logging
import threading
import time
from collections.abc import Callable

import anyio

from service.api.plan_thread import GivenUpError
from service.pipeline.in_flight import Mark

_log = logging.getLogger("service.pipeline")


class _TakeBacks:
    """The give-ups' take-back threads still running, and how long ``settle`` waits for them: the
    longest command timeout this process's apps or marks named (one process serves one app)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: set[threading.Thread] = set()
        self.bound_s = 0.0


_TAKING_BACK = _TakeBacks()


async def marked(take: Callable[[], Mark]) -> Mark:
    """``take()``'s mark, written on a thread of the shared pool. Cancelled meanwhile, the handler
    leaves no mark: the thread takes it back once written, or, written already, a thread of its own
    (Redis is not asked on the event loop)."""
    hop = _Hop()
    try:
        return await anyio.to_thread.run_sync(functools.partial(hop.run, take))
    except asyncio.CancelledError:
        written = hop.give_up()
        if written is not None:
            _take_back(written)
        raise


def _take_back(written: Mark) -> None:
    """Take ``written`` back on a daemon thread of its own (Redis is not asked on the event loop),
    which the app's stop and the process's exit wait for one command timeout at most (``settle``)."""
    thread = threading.Thread(target=_release, args=(written,), name="mark-given-up", daemon=True)
    with _TAKING_BACK.lock:
        _TAKING_BACK.running.add(thread)
        if written.ctx is not None:  # a drawn id's has none: the app's stop names the bound
            _TAKING_BACK.bound_s = max(_TAKING_BACK.bound_s, written.ctx.settings.redis_timeout_s)
    thread.start()


def _release(written: Mark) -> None:
    """The take-back thread: ``written.release()``, then off the list the exit waits for."""
    try:
        written.release()
    finally:
        with _TAKING_BACK.lock:
            _TAKING_BACK.running.discard(threading.current_thread())


@atexit.register
def settle(timeout_s: float = 0.0) -> int:
    """Wait for the give-ups' take-backs still running, for one command timeout at most (``timeout_s``,
    the app's, or the longest one named before), counted from here: one a Redis answers lands well
    within it. One still running then (a stalled Redis, through its retries) is cut, its mark left
    to lapse (logged), and not waited for again. Called as the app stops, before its Redis pool is
    closed under them (``service/app.py``: a connection closed mid-reply failed the take-back), and
    at the process's exit for those given up later (``atexit``). Returns how many were cut: the app
    leaves its pool open to them."""
    with _TAKING_BACK.lock:
        _TAKING_BACK.bound_s = bound_s = max(_TAKING_BACK.bound_s, timeout_s)
        running = list(_TAKING_BACK.running)
    until = time.monotonic() + bound_s
    for thread in running:
        thread.join(max(0.0, until - time.monotonic()))
    with _TAKING_BACK.lock:
        cut = [thread for thread in running if thread in _TAKING_BACK.running]
        _TAKING_BACK.running.difference_update(cut)
    if cut:
        _log.warning("in-flight mark take-backs cut at shutdown: left to lapse", extra={"count": len(cut)})
    return len(cut)


class _Hop:
    """Who comes last, the thread writing the mark or the handler giving it up: that one takes the
    mark back (a take-back of an entry never written would write nothing, but none is sent)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._given_up = False
        self._written: Mark | None = None

    def run(self, take: Callable[[], Mark]) -> Mark:
        """On the thread: ``take()``, unless the handler gave up first; taken back at once if the
        handler gave up while it was being written."""
        with self._lock:
            if self._given_up:
                raise GivenUpError("the request was given up before its in-flight mark was written")
        written = take()
        with self._lock:
            self._written, gone = written, self._given_up
        if gone:
            written.release()
        return written

    def give_up(self) -> Mark | None:
        """On the event loop, as the handler is cancelled: the mark written already, for the caller
        to take back; None where the thread will (or writes none)."""
        with self._lock:
            self._given_up = True
            written, self._written = self._written, None
        return written

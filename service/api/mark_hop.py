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
stops and at the process's exit (``settle``; ``serve`` runs the app in its main process), in the one
registry of such calls (``TAKE_BACKS``, a ``service/api/settling.py`` ``Settling``): the hop's write
and the take-back its thread hands on (the handler gave up during the write) are in it too. A handler
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
import threading
from collections.abc import Callable

import anyio

from service.api.plan_thread import GivenUpError
from service.api.settling import Settling
from service.pipeline.in_flight import Mark

# The give-ups' take-backs and the hops under way (``_Hop.run``), waited for as the app stops
# (``settle``) and at the process's exit.
TAKE_BACKS = Settling("in-flight mark take-backs")


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
    which the app's stop and the process's exit wait for one command timeout at most (``settle``).
    A drawn id's mark has no context: the app's stop names the bound."""
    bound_s = written.ctx.settings.redis_timeout_s if written.ctx is not None else 0.0
    TAKE_BACKS.start(written.release, "mark-given-up", bound_s)


@atexit.register
def settle(timeout_s: float = 0.0, left_s: float | None = None) -> int:
    """Wait for the give-ups' take-backs and the hops still under way, for one command timeout at
    most (``timeout_s``, the app's, or the longest one named before; ``left_s``, what is left of the
    stop's window), counted from here: one a Redis answers lands well within it. One still running
    then (a stalled Redis, through its retries) is cut, its mark left to lapse (logged), and not
    waited for again. Called as the app stops, before its Redis pool is closed under them
    (``service/app.py``: a connection closed mid-reply failed the take-back), and at the process's
    exit for those given up later (``atexit``). Returns how many were cut: the app leaves its pool
    open to them."""
    return TAKE_BACKS.settle(timeout_s, left_s)


class _Hop:
    """Who comes last, the thread writing the mark or the handler giving it up: that one takes the
    mark back (a take-back of an entry never written would write nothing, but none is sent)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._given_up = False
        self._written: Mark | None = None

    def run(self, take: Callable[[], Mark]) -> Mark:
        """On the thread: ``take()``, unless the handler gave up first; taken back at once (on a
        thread ``settle`` waits for) if the handler gave up while it was being written. The write is
        under way for ``settle`` too: the app's stop, which comes after its handler's cancel, waited
        for neither, and closed the Redis pool under them."""
        with TAKE_BACKS.under_way():  # the stop closes no pool under the write or its take-back
            with self._lock:
                if self._given_up:
                    raise GivenUpError("the request was given up before its in-flight mark was written")
            written = take()
            with self._lock:
                self._written, gone = written, self._given_up
            if gone:  # on a daemon the stop waits for: this thread is the shared pool's
                _take_back(written)
        return written

    def give_up(self) -> Mark | None:
        """On the event loop, as the handler is cancelled: the mark written already, for the caller
        to take back; None where the thread will (or writes none)."""
        with self._lock:
            self._given_up = True
            written, self._written = self._written, None
        return written

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
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable

import anyio

from service.api.plan_thread import GivenUpError
from service.pipeline.in_flight import Mark


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
            threading.Thread(target=written.release, name="mark-given-up").start()
        raise


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

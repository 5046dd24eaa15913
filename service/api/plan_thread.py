"""``POST /schedule``'s planning thread, whose ``Context.plan_threads`` token is given back when the
thread ends, not when the handler is cancelled.

anyio's ``to_thread.run_sync`` gives its limiter token back as soon as its task is cancelled the
native way (``Task.cancel``: uvicorn's graceful-shutdown timeout sends it to the handlers it still
waits on), while the thread it started cannot be stopped and plans on. Each such request let the
limiter start one thread more than it bounds. Here the call runs in a task of its own, which the
handler's cancel does not reach (``asyncio.shield``: uvicorn serves on asyncio only), so the token
is held until the thread ends.

A handler cancelled before its thread started (it waited for a token) gives the request up: its
thread, once it gets a token, runs only the request's ``given_up`` step (taking its in-flight mark
back), not the plan the trainer no longer waits for. Which of the two comes first is decided under
a lock (``_Start``), so a request is either planned whole or not at all. A call that never reaches a
thread (cancelled itself while it waits for a token: the loop ending, as ``asyncio.run`` cancels the
tasks left once uvicorn returns) runs ``given_up`` on a thread of its own: the planning thread that
was to run it never comes, and the mark was left to lapse (the plan queue's timeout + the budget +
60 s), a DELETE meanwhile withdrawing a step its request never planned.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
from anyio import CapacityLimiter

T = TypeVar("T")
# The calls running on after their handlers were cancelled: asyncio references a task only weakly.
_RUNNING: set[asyncio.Task[Any]] = set()


class GivenUpError(Exception):
    """The handler was cancelled before its thread started: the work was not run."""


async def run_to_end(
    work: Callable[[], T], given_up: Callable[[], None], limiter: CapacityLimiter | None
) -> T:
    """``work()`` on a thread of ``limiter`` (None: the shared pool), its token held until it ends.

    Cancelled before the thread started, the handler gives the work up: the thread runs
    ``given_up()`` instead. Cancelled after, the thread runs ``work`` to its end (a plan and its
    publish cannot be stopped halfway), and the cancel goes up at once."""
    start = _Start()
    task: asyncio.Task[T] = asyncio.ensure_future(_on_a_thread(start, work, given_up, limiter))
    _RUNNING.add(task)
    task.add_done_callback(_ended)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        start.give_up()
        raise


async def _on_a_thread(
    start: _Start, work: Callable[[], T], given_up: Callable[[], None], limiter: CapacityLimiter | None
) -> T:
    """``start.run(work, given_up)`` on a thread of ``limiter``. Cancelled itself before a thread took
    it up (the loop ending: the handler's cancel does not reach it), ``given_up`` runs on a thread of
    its own, which the loop's end does not stop: no thread of ``limiter`` ever will."""
    try:
        return await anyio.to_thread.run_sync(functools.partial(start.run, work, given_up), limiter=limiter)
    except asyncio.CancelledError:
        if start.abandon():
            threading.Thread(target=given_up, name="plan-given-up").start()
        raise


def _ended(task: asyncio.Task[Any]) -> None:
    """Forget the task; an error nobody awaits any more (its handler was cancelled) is read, so that
    asyncio does not log it as never retrieved: the request it belonged to has no one to answer."""
    _RUNNING.discard(task)
    if not task.cancelled():
        task.exception()


class _Start:
    """Who goes first, the thread starting the work or the handler giving it up; and, for a call
    that never reaches a thread (``abandon``), who runs ``given_up``: the one that comes first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started = False
        self._given_up = False
        self._taken = False  # a thread took the call up, or ``abandon`` ran ``given_up`` instead

    def run(self, work: Callable[[], T], given_up: Callable[[], None]) -> T:
        """On the thread: ``work()``, unless the handler gave it up first (``given_up()`` then), or
        ``abandon`` already ran ``given_up`` (nothing then)."""
        with self._lock:
            taken, self._taken = self._taken, True
            self._started = not self._given_up
        if not self._started:
            if not taken:
                given_up()
            raise GivenUpError("the request was given up before its planning thread started")
        return work()

    def give_up(self) -> None:
        """On the event loop, as the handler is cancelled: a thread not started yet will not plan."""
        with self._lock:
            self._given_up = not self._started

    def abandon(self) -> bool:
        """On the event loop, as the call itself is cancelled: whether no thread took it up, so the
        caller is to run ``given_up``; a thread that takes it up later then runs nothing."""
        with self._lock:
            if self._taken:
                return False
            self._taken = self._given_up = True
            return True

"""``POST /schedule``'s planning thread, whose ``Context.plan_threads`` token is given back when the
thread ends, not when the handler is cancelled, and whose request is planned whole or not at all:

- the token is held until the thread ends: anyio's ``to_thread.run_sync`` gives its limiter token
  back as soon as its task is cancelled the native way (``Task.cancel``: uvicorn's graceful-shutdown
  timeout sends it to the handlers it still waits on), while its thread cannot be stopped and plans
  on, one thread more than the limiter bounds. So the call runs in a task of its own, which the
  handler's cancel does not reach (``asyncio.shield``: uvicorn serves on asyncio only);
- a handler cancelled before its thread started gives the request up: its thread, once it gets a
  token, runs only the request's ``given_up`` step (taking its in-flight mark back), not the plan the
  trainer no longer waits for. Which of the two comes first is decided under a lock (``_Start``);
- a call that never reaches a thread (cancelled itself while it waits for a token: the loop ending,
  as ``asyncio.run`` cancels the tasks left once uvicorn returns) runs ``given_up`` on a thread of its
  own: otherwise the mark would lapse only after the plan queue's timeout + the budget + 60 s, and a
  DELETE meanwhile would withdraw a step its request never planned;
- a call still waiting for a token when its caller's deadline passes is given up the same way, and
  refused there (504): the deadline's own checks run only on the thread (``_in_time``);
- a give-up's own thread runs as the loop ends, so it is a daemon, waited for one command timeout at
  most as the app stops and at the exit (``GIVEN_UP``, ``service/api/settling.py``): a stalled Redis
  times a take-back out three times, which must not hold the exit. The deadline's give-up runs on a
  thread of the shared pool, which its handler's cancel does not stop: it is in ``GIVEN_UP`` from the
  moment it is handed on (``Settling.handed_on``), so the stop does not close the Redis pool under it.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import math
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
from anyio import CapacityLimiter

from service.api.settling import Settling
from service.pipeline.deadline import NO_DEADLINE, Deadline

T = TypeVar("T")
# The calls running on after their handlers were cancelled: asyncio references a task only weakly.
_RUNNING: set[asyncio.Task[Any]] = set()
# The give-ups' own threads (``_on_a_thread``), waited for as the app stops (``settle``) and at exit.
GIVEN_UP = Settling("planning-thread give-ups' take-backs")
atexit.register(GIVEN_UP.settle)


class GivenUpError(Exception):
    """The handler was cancelled before its thread started: the work was not run."""


async def run_to_end(
    work: Callable[[], T],
    given_up: Callable[[], None],
    limiter: CapacityLimiter | None,
    until: Deadline = NO_DEADLINE,
) -> T:
    """``work()`` on a thread of ``limiter`` (None: the shared pool), its token held until it ends.

    Cancelled before the thread started, the handler gives the work up: the thread runs
    ``given_up()`` instead. Cancelled after, the thread runs ``work`` to its end (a plan and its
    publish cannot be stopped halfway; ``POST /schedule``'s plan gives up at its next check, as its
    route sets its own stop at the cancel: ``service/api/stopping.py``), and the cancel goes up at
    once. Still waiting for a thread when the caller's deadline ``until`` passes, it is refused there
    (``_in_time``)."""
    start = _Start()
    task: asyncio.Task[T] = asyncio.ensure_future(_on_a_thread(start, work, given_up, limiter))
    _RUNNING.add(task)
    task.add_done_callback(_ended)
    try:
        await _in_time(task, (start, limiter), given_up, until)
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        start.give_up()
        raise


async def _in_time(
    task: asyncio.Task[T],
    waits: tuple[_Start, CapacityLimiter | None],
    given_up: Callable[[], None],
    until: Deadline,
) -> None:
    """Wait for ``task`` until the caller's deadline ``until``; where it passes while the call waits
    for a token of the limiter (``waits``: the call's start, and the limiter), give the call up
    (``given_up()`` on a thread of the shared pool: the in-flight mark taken back before the answer)
    and refuse it 504. The thread it waited for ran the deadline's checks only once it had one: past
    ``ROLLOUT_MAX_CONCURRENT_PLANS`` + 16 requests at once, the answer came when a thread freed, long
    after the caller had gone. A call with a token, or one free for it, is left to its thread: its
    own checks refuse it as ever, after the body's (a bad body's 422, a retry's replay)."""
    start, limiter = waits
    left_s = until.left_s()
    if limiter is None or math.isinf(left_s):
        return
    await asyncio.wait({task}, timeout=max(0.0, left_s))
    held = limiter.statistics()
    if task.done() or task in held.borrowers or held.borrowed_tokens < held.total_tokens:
        return
    if not start.abandon():  # a thread took it up meanwhile
        return
    task.cancel()  # it waits for a token only to run nothing
    # settled as the app stops: cancelled during it (uvicorn's graceful timeout), the thread runs on
    await anyio.to_thread.run_sync(GIVEN_UP.handed_on(given_up))
    raise until.exceeded("passed while it waited for a planning thread")


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
            GIVEN_UP.start(given_up, "plan-given-up")
        raise


def settle(timeout_s: float, left_s: float | None = None) -> int:
    """Wait for the give-ups' own threads, for ``timeout_s`` (at most ``left_s``), before the app
    closes its Redis pool; how many were cut (``Settling.settle``)."""
    return GIVEN_UP.settle(timeout_s, left_s)


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

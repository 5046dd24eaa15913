"""Ctrl-C with worker processes: only the parent hears it, and it leaves at once.

A terminal's Ctrl-C signals the whole foreground process group. Left alone, every spawned worker
raises its own KeyboardInterrupt and prints a traceback (mid-import, mid-plan or mid-claim), and the
parent then waits for the work already running (seconds of planning) before it can exit. Here the
workers ignore SIGINT from the moment they start, and an interrupted parent ends them itself.

A Ctrl-C must also never be lost on the parent's side: 4 of 830 interrupted replays on the loaded
2-core host ran on for 20 s and more, as if never interrupted (replay61). Three ways it can be:
ignored while a worker was spawned (``children_ignore_sigint`` now defers it); raised inside a
weakref callback or a ``__del__``, where Python prints "Exception ignored" and drops it; and handed
by the kernel to another thread while the main thread slept on a lock, which only the main thread's
next bytecode notices. ``remembered_sigint`` and ``wait_first`` close the last two: the Ctrl-C is
remembered, and the pool's waits wake often enough to raise it.

This module imports nothing heavy on purpose: a spawned worker unpickles ``ignore_sigint`` before it
runs it, so a heavy import here would widen the window in which a Ctrl-C still reaches the worker.
"""

from __future__ import annotations

import multiprocessing
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import contextmanager
from multiprocessing import resource_tracker
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any, ParamSpec, TypeVar, cast

P = ParamSpec("P")
T = TypeVar("T")
END_WAIT_S = 2.0  # how long an interrupted parent waits for a terminated worker (or the pool) to be gone
POLL_S = 0.2  # how often a main thread waiting on workers wakes to raise a Ctrl-C it has not raised yet
_HEARD = threading.Event()  # a Ctrl-C arrived inside ``remembered_sigint`` (set even where it was dropped)
_REMEMBERING = threading.Event()  # a ``remembered_sigint`` block is open (the main thread's: one at a time)


def ignore_sigint() -> None:
    """First act of a worker process (a pool initializer): leave Ctrl-C to the parent, which ends
    its workers itself, so a worker never prints a KeyboardInterrupt traceback of its own."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextmanager
def children_ignore_sigint() -> Iterator[None]:
    """Processes started inside begin life deaf to SIGINT, and a Ctrl-C heard meanwhile is deferred
    to the block's end, not lost.

    The calling thread blocks SIGINT: a blocked signal stays blocked across fork and exec, so a
    spawned worker cannot act on a Ctrl-C during its interpreter start and bootstrap imports (it
    stays pending) until its ``ignore_sigint``, which discards it. The parent's own Ctrl-C is kept
    by a handler that only records it and is raised again once the block ends. The block used to
    ignore SIGINT instead: the parent then dropped any Ctrl-C that arrived during a worker's spawn,
    up to ~90 ms each on the loaded 2-core host and 0.6-0.75% of a replay's run, and the replay ran
    on as if never interrupted (replay61). Only the main thread may set handlers; elsewhere it does
    nothing.

    multiprocessing's resource tracker is started first, outside the block: the first process a
    spawn context starts also starts the tracker, and that start ends by unblocking SIGINT (CPython
    blocks it around the tracker's spawn, then unblocks rather than restoring the mask), so the
    worker it was started for began life hearing Ctrl-C. ``QuietPool`` and ``bench`` built a queue
    before their block, which starts it, and were spared; the block itself was not (mutants62).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    resource_tracker.ensure_running()
    heard: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: heard.append(signum))
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        _put_back(previous)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # one pending now is delivered
        if heard:
            signal.raise_signal(signal.SIGINT)  # to the handler just put back


@contextmanager
def remembered_sigint() -> Iterator[None]:
    """Inside, a Ctrl-C is remembered as well as raised, so that ``raise_if_interrupted`` (and
    ``wait_first``) raise it again where Python dropped it: a KeyboardInterrupt raised inside a
    weakref callback or a ``__del__`` (an import's module-lock callback, a finalizer run by the
    garbage collector) is printed as "Exception ignored" and swallowed, and the replay ran on to its
    end (replay61). Main thread only, and not where SIGINT is ignored (a background job's).

    Nested, the inner block is the outer's own: it changes nothing, and a Ctrl-C heard in either is
    remembered until the outer block ends. An inner block that did as the outer had forgotten at its
    start a Ctrl-C dropped before it, and at its end one dropped inside it (edges63)."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous is signal.SIG_IGN:
        yield
        return
    if _REMEMBERING.is_set():  # inside another block: its handler remembers, its end forgets
        yield
        return

    def remember(signum: int, frame: FrameType | None) -> Any:
        _HEARD.set()
        if callable(previous):
            return previous(signum, frame)
        raise KeyboardInterrupt

    _HEARD.clear()
    signal.signal(signal.SIGINT, remember)
    try:
        _REMEMBERING.set()
        yield
    finally:
        _put_back(previous)
        _HEARD.clear()
        _REMEMBERING.clear()


def _put_back(previous: Callable[[int, FrameType | None], Any] | int | None) -> None:
    """SIGINT's handler as it was before a block replaced it; where ``signal.getsignal`` said None (a
    handler not set from Python, which Python cannot set again), Python's own Ctrl-C handler."""
    signal.signal(signal.SIGINT, signal.default_int_handler if previous is None else previous)


def raise_if_interrupted() -> None:
    """Raise KeyboardInterrupt where a Ctrl-C arrived inside ``remembered_sigint``, whether or not
    its own KeyboardInterrupt got out."""
    if _HEARD.is_set():
        raise KeyboardInterrupt


def wait_first(futures: Iterable[Future[T]], block: bool) -> set[Future[T]]:
    """The finished of ``futures``: at least one where ``block``, else whatever is done now.

    Waits in ``POLL_S`` slices, raising a remembered Ctrl-C between them. Python runs a signal's
    handler only in the main thread, and a signal the kernel hands to another thread (LightGBM's,
    pyarrow's, the pool's own) does not wake a main thread asleep on a lock: one wait for the first
    of several plans could sleep through a Ctrl-C for as long as they ran (seconds).
    """
    pending = list(futures)
    while True:
        raise_if_interrupted()
        done, _ = wait(pending, timeout=POLL_S if block else 0, return_when=FIRST_COMPLETED)
        if done or not block:
            return done


def end_processes(processes: Iterable[BaseProcess]) -> None:
    """Terminate ``processes`` and reap them: the parent was interrupted, so nothing they would
    still compute is read, and a worker left running could act on state the parent then removes."""
    alive = [p for p in processes if p.is_alive()]
    for process in alive:
        process.terminate()
    for process in alive:
        process.join(END_WAIT_S)


class QuietPool(ProcessPoolExecutor):
    """A spawned process pool whose workers ignore Ctrl-C (see the module docstring).

    Workers are spawned on ``submit`` (the spawn context starts them on demand), so that is where
    they are given SIGINT blocked; the initializer ignores it, in any the pool starts elsewhere too.
    """

    def __init__(self, processes: int) -> None:
        spawn = multiprocessing.get_context("spawn")  # the parent may have threads running (LightGBM's)
        super().__init__(processes, mp_context=spawn, initializer=ignore_sigint)

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        """Queue ``fn``; a worker started for it is deaf to SIGINT from its first instruction."""
        with children_ignore_sigint():
            return super().submit(fn, *args, **kwargs)

    def abandon(self) -> None:
        """Drop queued work and end the workers now, without waiting for the running work: an
        interrupted parent would otherwise wait seconds for a plan nobody will read.

        Returns once the pool's manager thread is done too. Seeing its workers gone, that thread
        closes its wake-up pipe; interpreter exit writes to the same pipe (``_python_exit``), and
        before CPython 3.12.8 nothing orders the two (gh-125451). An interrupted parent exits within
        milliseconds, so on a loaded host the two raced and Ctrl-C printed "Exception ignored ...
        Bad file descriptor" after its one line. Joined here, the close comes first and exit finds
        the pipe closed, which it skips.
        """
        workers = list((self._processes or {}).values())  # shutdown forgets them
        manager = cast("threading.Thread | None", self._executor_manager_thread)  # typeshed mistypes it
        self.shutdown(wait=False, cancel_futures=True)
        end_processes(workers)
        if manager is not None:
            manager.join(END_WAIT_S)  # milliseconds once the workers are gone


@contextmanager
def quiet_pool(processes: int) -> Iterator[QuietPool]:
    """A ``QuietPool`` shut down normally on the way out, or abandoned when Ctrl-C interrupts; a
    Ctrl-C inside is remembered (``remembered_sigint``) for ``wait_first`` to raise, or raised as
    the block ends where Python dropped it after the last wait (it had been forgotten with the
    block, and a replay went on to its report as if never interrupted: review62)."""
    with QuietPool(processes) as pool, remembered_sigint():  # after ``abandon``, exit has nothing to wait for
        try:
            yield pool
            raise_if_interrupted()
        except KeyboardInterrupt:
            pool.abandon()
            raise

"""Ctrl-C with worker processes: only the parent hears it, and it leaves at once.

A terminal's Ctrl-C signals the whole foreground process group. Left alone, every spawned worker
raises its own KeyboardInterrupt and prints a traceback (mid-import, mid-plan or mid-claim), and the
parent then waits for the work already running (seconds of planning) before it can exit. Here the
workers ignore SIGINT from the moment they start, and an interrupted parent ends them itself.

This module imports nothing heavy on purpose: a spawned worker unpickles ``ignore_sigint`` before it
runs it, so a heavy import here would widen the window in which a Ctrl-C still reaches the worker.
"""

from __future__ import annotations

import multiprocessing
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from multiprocessing.process import BaseProcess
from typing import ParamSpec, TypeVar, cast

P = ParamSpec("P")
T = TypeVar("T")
END_WAIT_S = 2.0  # how long an interrupted parent waits for a terminated worker (or the pool) to be gone


def ignore_sigint() -> None:
    """First act of a worker process (a pool initializer): leave Ctrl-C to the parent, which ends
    its workers itself, so a worker never prints a KeyboardInterrupt traceback of its own."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextmanager
def children_ignore_sigint() -> Iterator[None]:
    """Processes started inside begin life with SIGINT ignored.

    An ignored signal stays ignored across exec, and Python then installs no KeyboardInterrupt
    handler, so this closes the window between a spawned worker's start and its ``ignore_sigint``
    (its interpreter start and bootstrap imports). A Ctrl-C in the block itself (a fork and an exec
    per worker: milliseconds) is lost. Only the main thread may set handlers; elsewhere it does
    nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler if previous is None else previous)


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
    they are given SIGINT ignored; the initializer repeats it for any the pool starts elsewhere.
    """

    def __init__(self, processes: int) -> None:
        spawn = multiprocessing.get_context("spawn")  # the parent may have threads running (LightGBM's)
        super().__init__(processes, mp_context=spawn, initializer=ignore_sigint)

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        """Queue ``fn``; a worker started for it ignores SIGINT from its first instruction."""
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
    """A ``QuietPool`` shut down normally on the way out, or abandoned when Ctrl-C interrupts."""
    with QuietPool(processes) as pool:  # its exit after ``abandon`` has nothing left to wait for
        try:
            yield pool
        except KeyboardInterrupt:
            pool.abandon()
            raise

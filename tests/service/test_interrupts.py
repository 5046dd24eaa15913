"""An abandoned ``QuietPool`` (Ctrl-C in ``replay``) leaves nothing running for interpreter exit to race."""

from __future__ import annotations

import threading
import time
from concurrent.futures.process import _ExecutorManagerThread

import pytest

from service.interrupts import QuietPool

LOADED_HOST_DELAY_S = 0.3  # how late the manager thread tidies up when the host's cores are busy


def _managers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if isinstance(t, _ExecutorManagerThread)]


def test_abandon_returns_only_once_the_pools_manager_thread_is_done(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its manager thread closes a pipe that interpreter exit writes to, unordered before CPython
    3.12.8: still running when an interrupted ``replay`` exits, it raced the exit and Ctrl-C printed
    a "Bad file descriptor" traceback. Here it is slowed down as on a loaded host."""
    tidy_up = _ExecutorManagerThread.join_executor_internals

    def late_tidy_up(self: _ExecutorManagerThread) -> None:
        time.sleep(LOADED_HOST_DELAY_S)
        tidy_up(self)

    monkeypatch.setattr(_ExecutorManagerThread, "join_executor_internals", late_tidy_up)
    pool = QuietPool(1)
    pool.submit(time.sleep, 30.0)
    assert _managers()
    pool.abandon()
    assert not _managers()

"""The pull sidecar's connect (``connecting.in_daemon_thread``) when the server stops before Redis
answers: the waiting task is cancelled, and the thread's answer arriving afterwards settles nothing
(no "exception in callback" from the loop, whose future is cancelled already); and the connect runs
in a daemon thread whose error, of any kind, reaches the waiting task. Kills mutants that survived
round 46's tests (helper mutants10, docs/experiments.md)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
import redis

from service.sidecar.connecting import in_daemon_thread

GUARD_S = 30.0


def test_an_answer_after_the_wait_was_cancelled_settles_nothing() -> None:
    errors: list[dict[str, Any]] = []
    answer = threading.Event()

    def connect() -> str:
        answer.wait(GUARD_S)
        return "session"

    async def run() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _, context: errors.append(context))
        before = set(threading.enumerate())
        waiting = asyncio.create_task(in_daemon_thread(connect))
        await asyncio.sleep(0)
        waiting.cancel()
        answer.set()
        for thread in set(threading.enumerate()) - before:
            await asyncio.to_thread(thread.join, GUARD_S)  # it handed its answer to the loop
        for _ in range(3):  # and the loop ran what it handed
            await asyncio.sleep(0)
        assert waiting.cancelled()

    asyncio.run(run())
    assert errors == []


def test_the_connect_runs_in_a_daemon_thread_and_hands_back_its_error() -> None:
    """A daemon thread: the process's exit after SIGTERM does not wait for a connect that has no end.
    Its error, whatever it is (refused credentials are a ``redis.AuthenticationError``), is the
    waiting task's, which would otherwise wait for ever."""
    daemons: list[bool] = []

    def refused() -> str:
        daemons.append(threading.current_thread().daemon)
        raise redis.AuthenticationError("invalid password")

    async def run() -> None:
        await asyncio.wait_for(in_daemon_thread(refused), GUARD_S)

    with pytest.raises(redis.AuthenticationError):
        asyncio.run(run())
    assert daemons == [True]

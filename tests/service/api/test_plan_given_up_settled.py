"""The thread of a planning call given up as the event loop ends (``plan_thread._on_a_thread``), and
the other threads a replica's stop settles (``service/api/settling.py``).

That thread takes the request's in-flight mark back as the process ends. It was a plain thread, so
on a stalled Redis it held the exit through the take-back's three tries. Now it is a daemon that the
app's stop and the exit wait for, up to one command timeout, and then cut. A thread that ends within
that wait is never cut. Each test checks which threads were cut, never how long anything took.
"""

from __future__ import annotations

import asyncio
import threading

import anyio
import pytest

from service.api import plan_thread
from service.api.settling import Settling
from service.pipeline.deadline import Deadline
from tests.service.api.replicas import WAIT_S, until


def test_a_call_given_up_as_the_loop_ends_takes_back_on_a_daemon_the_stop_cuts() -> None:
    """One call holds the only token; a second waits for it when the loop ends, so its ``given_up``
    runs on a thread of its own. Held there (a stalled Redis), it does not hold the exit: it is a
    daemon, and a settle cuts it."""
    holding, taking_back, answered = threading.Event(), threading.Event(), threading.Event()

    def given_up() -> None:
        taking_back.set()
        answered.wait(WAIT_S)

    async def loop_ending_with_a_call_in_line() -> None:
        limiter = anyio.CapacityLimiter(1)
        calls = [
            asyncio.create_task(plan_thread.run_to_end(lambda: holding.wait(WAIT_S), lambda: None, limiter))
        ]
        await until(lambda: limiter.borrowed_tokens == 1)
        calls.append(asyncio.create_task(plan_thread.run_to_end(lambda: True, given_up, limiter)))
        await until(lambda: limiter.statistics().tasks_waiting == 1)  # left running: the loop ends

    before = set(threading.enumerate())
    asyncio.run(loop_ending_with_a_call_in_line())  # cancels the call waiting for the token
    holding.set()
    assert taking_back.wait(WAIT_S)
    [thread] = [t for t in set(threading.enumerate()) - before if t.name == "plan-given-up"]
    cut = plan_thread.settle(0.0, left_s=0.0)  # a leftover of an earlier test may be cut with it
    assert (thread.daemon, cut >= 1, plan_thread.settle(0.0, left_s=0.0), thread.is_alive()) == (
        True,
        True,
        0,
        True,
    )
    answered.set()


def test_a_thread_that_ends_within_the_wait_is_not_cut(caplog: pytest.LogCaptureFixture) -> None:
    """The thread ends within ``settle``'s wait (its Redis answered): nothing is cut or logged."""
    settling, answered = Settling("take-backs"), threading.Event()
    ended: list[object] = []
    settling.start(lambda: ended.append(answered.wait(WAIT_S)), "take-back")
    waiting = threading.Thread(target=lambda: ended.append(settling.settle(WAIT_S)))
    waiting.start()
    answered.set()
    waiting.join()
    assert (ended, caplog.records) == ([True, 0], [])


def test_a_take_back_at_the_deadline_is_settled_once_its_handler_is_cancelled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The caller's deadline passes while the call waits for the only token: its ``given_up`` runs
    on a thread of the shared pool, and the handler is cancelled meanwhile (uvicorn's graceful
    timeout). The thread runs on, on Redis; held there, the app's stop counts it (cut), so it leaves
    the Redis pool open to it: no settle waited for it, and the pool was closed under it."""
    settling, holding, taking_back, answered = Settling("take-backs"), *(threading.Event() for _ in "123")
    monkeypatch.setattr(plan_thread, "GIVEN_UP", settling)

    def given_up() -> None:
        taking_back.set()
        answered.wait(WAIT_S)

    async def cancelled_during_the_take_back() -> int:
        limiter = anyio.CapacityLimiter(1)
        holder = asyncio.create_task(
            plan_thread.run_to_end(lambda: holding.wait(WAIT_S), lambda: None, limiter)
        )
        await until(lambda: limiter.borrowed_tokens == 1)
        late = asyncio.create_task(plan_thread.run_to_end(lambda: True, given_up, limiter, Deadline(at=0.0)))
        await until(taking_back.is_set)
        late.cancel()
        await asyncio.gather(late, return_exceptions=True)
        cut = settling.settle(0.0, left_s=0.0)
        answered.set()
        holding.set()
        await holder
        return cut

    assert asyncio.run(cancelled_during_the_take_back()) == 1

"""Replicas of the service in one event loop, for the concurrency tests: each an app with its
lifespan run, behind an ``httpx.AsyncClient`` on its ASGI interface, all on the same real Redis.

A plain module, imported by name. The tests drive races with events and barriers that the
requests' planning threads meet, never with sleeps that hope for an order."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, TypeVar

import httpx
import pytest
from fastapi import FastAPI

from service.app import create_app
from service.context import Context
from service.settings import Settings

T = TypeVar("T")
WAIT_S = 60.0  # a bound against never, for what the tests wait on; met at once when right


@asynccontextmanager
async def replicas(settings: Settings, count: int = 1) -> AsyncIterator[list[httpx.AsyncClient]]:
    """``count`` apps built from ``settings`` (one Redis, one model store), started; a client each."""
    async with AsyncExitStack() as stack:
        clients = []
        for _ in range(count):
            app = create_app(settings)
            await stack.enter_async_context(app.router.lifespan_context(app))
            transport = httpx.ASGITransport(app=app)
            client = httpx.AsyncClient(transport=transport, base_url="http://testserver", timeout=WAIT_S)
            clients.append(await stack.enter_async_context(client))
        yield clients


def context(client: httpx.AsyncClient) -> Context:
    """The context of the app ``client`` talks to."""
    transport = client._transport
    assert isinstance(transport, httpx.ASGITransport)
    app = transport.app
    assert isinstance(app, FastAPI)
    ctx: Context = app.state.context
    return ctx


async def until(condition: Callable[[], bool]) -> None:
    """Return once ``condition()`` holds, checked as the event loop turns (AssertionError after
    ``WAIT_S``): a state another task or thread reaches, not a time."""
    async with asyncio.timeout(WAIT_S):
        while not condition():
            await asyncio.sleep(0.005)


def first(wait: Callable[[], object], call: Callable[..., T]) -> Callable[..., T]:
    """``call``, made to run ``wait`` (a gate, a barrier's ``wait``) before it, on the caller's thread."""

    def waited(*args: Any, **kwargs: Any) -> T:
        wait()
        return call(*args, **kwargs)

    return waited


class Gate:
    """Holds the threads that reach it until opened; counts them, so a test knows they are there."""

    def __init__(self) -> None:
        self._open = threading.Event()
        self._lock = threading.Lock()
        self.reached = 0

    def __call__(self, *_: Any) -> None:
        """Wait here (on a request's thread) until the gate opens."""
        with self._lock:
            self.reached += 1
        if not self._open.wait(WAIT_S):
            raise TimeoutError("the gate was never opened")

    def before(self, call: Callable[..., T]) -> Callable[..., T]:
        """``call``, made to wait at this gate first."""
        return first(self, call)

    def after(self, call: Callable[..., T]) -> Callable[..., T]:
        """``call``, then a wait at this gate, on the caller's thread: held once its work is done and
        before its caller hears of it."""

        def then_wait(*args: Any, **kwargs: Any) -> T:
            result = call(*args, **kwargs)
            self()
            return result

        return then_wait

    def open(self) -> None:
        """Let every thread waiting, and every later one, through."""
        self._open.set()


async def cancelled_at(gate: Gate, request: Coroutine[Any, Any, object], seen: Callable[[], int]) -> int:
    """Send ``request`` as a task, cancel it the native way (``Task.cancel``) once a thread of it
    reaches ``gate``, then let the thread on; ``seen()`` as it was at the cancel."""
    given_up = asyncio.create_task(request)
    await until(lambda: gate.reached == 1)
    at_the_cancel = seen()
    given_up.cancel()
    with pytest.raises(asyncio.CancelledError):
        await given_up
    gate.open()
    return at_the_cancel

"""The pull API's shutdown bound on requests in flight: what the drain gives up on is one warning line.

Why. On SIGTERM the pull sidecar gives the requests in flight ``--drain-timeout`` to finish (a
``/done`` retrying through a Redis outage would hold on for its whole retry window, a minute, past the
pod's grace period). uvicorn's ``timeout_graceful_shutdown`` did the cutting, and a clean shutdown
then logged two ERROR lines: ``Cancel 1 running task(s), timeout graceful shutdown exceeded`` and
``Exception in ASGI application`` with a ``CancelledError`` traceback, and the worker got a bare 500.
Nothing had failed: the drain did what it promises. So the app bounds its own requests: once the
server is stopping (``stopping``) and the drain timeout has passed, one WARNING names each request
it gives up on, each is cancelled and answered 503 in the pull API's ``{"error"}`` shape, and what
the worker held is then handed back by the lifespan as before. uvicorn's own bound stays as a
backstop, past this one (``launch._pull_server``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("service.sidecar")
POLL_S = 0.05  # how soon the stop, then the end of the requests, is noticed


class DrainCutError(RuntimeError):
    """A request the shutdown's drain gave up on (a 503 in the problem table: ``pull_api``)."""

    def __init__(self, drain_timeout_s: float, hurried: bool = False) -> None:
        when = "at a second signal" if hurried else f"after its {drain_timeout_s:.1f}s drain timeout"
        super().__init__(
            f"the sidecar is shutting down and gave up on this request {when};"
            " what this worker held is handed back"
        )


class InFlightRequests:
    """The requests the pull API is answering, by task, and those the drain gave up on."""

    def __init__(self) -> None:
        self._running: dict[asyncio.Task[object], str] = {}
        self._given_up: set[asyncio.Task[object]] = set()
        self.drain_ends: float | None = None  # monotonic time the drain is over by, once stopping

    def ends_by(self) -> float:
        """When the drain is over: its deadline once the stop was seen, else now (a shutdown for
        another reason). The hand-back's grace counts from it, not from when uvicorn got round to the
        app's shutdown, up to a tick later (its ``0.1 s`` loop), so the exit keeps to the promise."""
        return time.monotonic() if self.drain_ends is None else self.drain_ends

    def __len__(self) -> int:
        return len(self._running)

    async def bound(
        self,
        stopping: Callable[[], bool],
        drain_timeout_s: float,
        hurried: Callable[[], bool] = lambda: False,
    ) -> None:
        """Once ``stopping()``, wait up to ``drain_timeout_s`` for the requests in flight, or until
        ``hurried()`` (a second signal), then give up on those left: one warning naming them, and each
        cancelled (answered 503)."""
        while not stopping():
            await asyncio.sleep(POLL_S)
        deadline = self.drain_ends = time.monotonic() + drain_timeout_s
        while self._running and time.monotonic() < deadline and not hurried():
            await asyncio.sleep(POLL_S)
        if hurried():  # the hand-back's grace counts from now, not from the drain's deadline
            self.drain_ends = min(deadline, time.monotonic())
        if not self._running:
            return
        left = dict(self._running)
        when = "at a second signal" if hurried() else f"after the {drain_timeout_s:.1f}s drain timeout"
        log.warning(
            "shutting down: gave up on %d request(s) still running %s (%s);"
            " answered 503, and what the worker held is handed back",
            len(left),
            when,
            ", ".join(left.values()),
        )
        for task in left:
            self._given_up.add(task)
            task.cancel()

    def given_up(self, task: asyncio.Task[object]) -> bool:
        """Whether ``task`` was cancelled by ``bound`` (not by anything else)."""
        return task in self._given_up

    def begin(self, task: asyncio.Task[object], what: str) -> None:
        """``task`` answers the request ``what`` (``GET /next``), from now until ``end``."""
        self._running[task] = what

    def end(self, task: asyncio.Task[object]) -> None:
        """``task``'s request is answered (or cut short): forgotten."""
        self._running.pop(task, None)
        self._given_up.discard(task)


class DrainBoundMiddleware:
    """Pure ASGI middleware, outermost: tracks each HTTP request's task in ``requests``; a request the
    drain gave up on is answered ``refusal()`` (when no answer has started; a ``DrainCutError``'s 503)
    instead of ending in a ``CancelledError`` that uvicorn logs as an error."""

    def __init__(
        self,
        app: ASGIApp,
        requests: InFlightRequests,
        refusal: Callable[[], Response],
    ) -> None:
        self.app = app
        self.requests = requests
        self.refusal = refusal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer the request through the app, within the drain's bound."""
        task = asyncio.current_task()
        if scope["type"] != "http" or task is None:
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        self.requests.begin(task, f"{scope['method']} {scope['path']}")
        try:
            await self.app(scope, receive, tracked)
        except asyncio.CancelledError:
            if not self.requests.given_up(task):
                raise  # not ours: a disconnect, the server's own cancel
            task.uncancel()  # ours, and handled here: the request ends with its answer
            if not started:
                await self.refusal()(scope, receive, send)
        finally:
            self.requests.end(task)

"""A request that uvicorn's graceful wait cut is answered the stop's 503, not uvicorn's 500.

Why. At SIGTERM uvicorn waits ``serve.GRACEFUL_SHUTDOWN_S`` for the requests in flight, then cancels
the handlers still running (``Task.cancel``). The cancel goes up through the app (``plan_thread.run_to_end``
re-raises it: the plan runs on, on its thread, and gives up at the stop), and uvicorn answers a cancel
raised before the response began as any exception: ``500 Internal Server Error``, with an
``Exception in ASGI application`` traceback. ``service.client`` does not retry a 500, so a trainer's
step failed at a rolling restart, though the request had published nothing and taken its marks back
(chaos12: every request still in line for a plan slot when the wait ended, 5 of 14 stops).

How. ``serve`` builds its app with this middleware (``create_app(answer_cuts=True)``), inside the metrics'
one: a cancel that reaches it before the response began is answered 503 (``Retry-After: 1``), which every
client retries, and logged as one WARNING line. The cancel is not raised on: nothing above the app waits on
it but uvicorn's own request task, which then ends, and the loop's end cancels whatever is still running
again. Only ``serve`` installs it: an app inside a test's client is cancelled by the test, which sees its
cancel.

What the 503 promises. A request cut while it waited for a plan slot or planned publishes nothing
(the plan gives up at the stop, which follows the cancel: ``service/api/stopping.py``). A publish
already under way at the cut runs to its end (one Lua call): its step may be out though the answer
says 503. A retry under the same caller-chosen ``schedule_id`` is then answered the published plan; a
retry of a drawn id plans a second step, as after any answer lost after its publish (docs/api.md).
"""

from __future__ import annotations

import asyncio
import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.problems.table import problem_response

CUT_DETAIL = (
    "the replica stopped before this request was answered (its graceful wait ended): retry it; "
    "a POST /schedule published nothing unless its publish was already under way, and a retry "
    "under the same schedule_id is answered the plan it published"
)
_log = logging.getLogger("service.http")


class CutAnswer:
    """Middleware: an HTTP request cancelled before its response began is answered the stop's 503.
    Inside the metrics' middleware, so the request is counted and logged with the status it got."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request through; a cancel before its response began is answered 503, not raised."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except asyncio.CancelledError:
            if started:  # a response under way cannot be turned into another: uvicorn closes it
                raise
            _log.warning("request cut at the stop: answered 503", extra={"path": scope.get("path", "")})
            cut = problem_response(
                503,
                "Service unavailable",
                CUT_DETAIL,
                slug="unavailable",
                instance=scope.get("path", ""),
                headers={"Retry-After": "1"},
            )
            await cut(scope, receive, send)

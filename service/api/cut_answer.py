"""A request that uvicorn's graceful wait cut is answered the stop's 503, not uvicorn's 500.

Why. At SIGTERM uvicorn waits ``ROLLOUT_GRACEFUL_SHUTDOWN_S`` for the requests in flight, then cancels
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

What the 503 promises. A request cut while it waited for a plan slot or planned publishes nothing:
its plan gives up at the cut, not only at the app's stop, which follows the cancels (a plan that
reached the publish check in between found no stop and published: stop50). Before the answer is
sent, the request's own stop (``cut_event``, which ``POST /schedule`` reads beside the app's:
``service/api/stopping.py``) is set. An app without this middleware (one in a test's client) keeps a
cancelled handler's plan running to its end and published, as ``plan_thread`` says. A publish already
under way at the cut (past that check) runs to its end (one Lua call): its step may be out though
the answer says 503. A retry under the same caller-chosen ``schedule_id`` is then answered the
published plan; a retry of a drawn id plans a second step, as after any answer lost after its
publish (docs/api.md).
"""

from __future__ import annotations

import asyncio
import logging
import threading

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.problems.table import problem_response

CUT_DETAIL = (
    "the replica stopped before this request was answered (its graceful wait ended): retry it; "
    "a POST /schedule published nothing unless its publish was already under way, and a retry "
    "under the same schedule_id is answered the plan it published"
)
# The scope's key of a request's own stop, set as ``CutAnswer`` answers its cut (``cut_event``).
CUT_EVENT = "rollout_scheduler.cut"
_log = logging.getLogger("service.http")


def cut_event(scope: Scope) -> threading.Event:
    """The request's own stop: set by ``CutAnswer`` once the request is cut, before its 503 is sent, so
    that a plan that would publish after it gives up (``stopping.Either``); never set without it."""
    event = scope.get(CUT_EVENT)
    if not isinstance(event, threading.Event):
        event = scope[CUT_EVENT] = threading.Event()
    return event


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
            cut_event(scope).set()  # first: what the answer says holds from here (``stopping``)
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

"""The pull API's drain (``pull_drain``): at shutdown, requests in flight get the drain timeout to end
before they are given up on. No server: the requests are tasks."""

from __future__ import annotations

import asyncio

from starlette.responses import JSONResponse
from starlette.types import Message, Receive, Scope, Send

from service.sidecar.pull_drain import DrainBoundMiddleware, InFlightRequests


def test_a_request_that_ends_within_the_drain_timeout_is_waited_for_not_given_up_on() -> None:
    """A ``/done`` still landing as the server stops keeps its answer; only one still running at the
    timeout is cancelled (answered 503)."""

    async def scenario() -> tuple[bool, bool, str]:
        requests = InFlightRequests()
        quick = asyncio.create_task(asyncio.sleep(0.3, "answered"))
        slow = asyncio.create_task(asyncio.sleep(600))
        for task, what in ((quick, "POST /done"), (slow, "GET /next")):
            requests.begin(task, what)
            task.add_done_callback(requests.end)
        await requests.bound(lambda: True, drain_timeout_s=5.0)
        await asyncio.gather(slow, return_exceptions=True)
        return quick.cancelled(), slow.cancelled(), quick.result()

    quick_cancelled, slow_cancelled, answer = asyncio.run(scenario())
    assert (quick_cancelled, answer) == (False, "answered")
    assert slow_cancelled


def _given_up_request(answer_started: bool) -> list[Message]:
    """The messages a client is sent for one request that the drain gives up on while its app waits,
    after sending its answer's start (and a first body chunk) or before sending anything."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if answer_started:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"{", "more_body": True})
        await asyncio.sleep(600)

    async def scenario() -> list[Message]:
        sent: list[Message] = []

        async def send(message: Message) -> None:
            sent.append(message)

        async def receive() -> Message:
            return {"type": "http.disconnect"}

        requests = InFlightRequests()
        middleware = DrainBoundMiddleware(app, requests, lambda: JSONResponse({"error": "cut"}, 503))
        scope: Scope = {"type": "http", "method": "GET", "path": "/next", "headers": []}
        request = asyncio.create_task(middleware(scope, receive, send))
        while not len(requests):
            await asyncio.sleep(0.01)
        await requests.bound(lambda: True, drain_timeout_s=0.0)
        await request  # handled by the middleware: no CancelledError reaches the server
        return sent

    return asyncio.run(scenario())


def test_a_request_given_up_before_its_answer_started_is_answered_503() -> None:
    """The worker gets the pull API's ``{"error"}`` 503, not a bare 500 from a cancelled app."""
    starts = [m for m in _given_up_request(answer_started=False) if m["type"] == "http.response.start"]
    assert [m["status"] for m in starts] == [503]


def test_a_request_given_up_after_its_answer_started_is_not_sent_a_second_start() -> None:
    """An answer already under way cannot be replaced: a second ``http.response.start`` would be an
    ASGI protocol error the server logs as an exception. The client sees the first answer end short."""
    starts = [m for m in _given_up_request(answer_started=True) if m["type"] == "http.response.start"]
    assert [m["status"] for m in starts] == [200]

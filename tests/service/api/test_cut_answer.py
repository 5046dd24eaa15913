"""``serve``'s middleware (``service/api/cut_answer.py``): a request cancelled before its response began,
as uvicorn's graceful wait cancels it, is answered the stop's 503 (which the client retries), not
uvicorn's 500; one whose response had begun keeps its cancel; other requests pass through untouched.
The cancel is sent the way uvicorn sends it (``Task.cancel`` on the request's task)."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from starlette.types import Message, Receive, Scope, Send

from service.api.cut_answer import CUT_DETAIL, CutAnswer, cut_event
from service.client.wire import SchedulerAPIError

SCOPE: Scope = {"type": "http", "method": "POST", "path": "/schedule", "headers": []}


async def _waits_for_ever(scope: Scope, receive: Receive, send: Send) -> None:
    await asyncio.Event().wait()


async def _begins_then_waits(scope: Scope, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await asyncio.Event().wait()


async def _answers_200(scope: Scope, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


async def _receive() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}


def _run(app: Any, cut: bool) -> list[Message]:
    """Run the wrapped ``app`` on one request, its task cancelled once it waits where ``cut``; what
    it sent."""
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    async def run() -> None:
        task = asyncio.ensure_future(CutAnswer(app)(dict(SCOPE), _receive, send))  # a cut sets a key
        if cut:
            await asyncio.sleep(0.01)
            task.cancel(msg="Task cancelled, timeout graceful shutdown exceeded")  # uvicorn's words
        await task

    asyncio.run(run())
    return sent


def _cut(app: Any) -> list[Message]:
    return _run(app, cut=True)


def test_a_request_cut_before_its_response_is_answered_the_stops_503() -> None:
    start, body = _cut(_waits_for_ever)
    assert start["status"] == 503
    assert (b"retry-after", b"1") in start["headers"]
    problem = json.loads(body["body"])
    assert (problem["type"].rsplit("/", 1)[1], problem["detail"]) == ("unavailable", CUT_DETAIL)
    assert SchedulerAPIError(start["status"], problem).retryable


def test_a_request_cut_after_its_response_began_keeps_its_cancel() -> None:
    with pytest.raises(asyncio.CancelledError):
        _cut(_begins_then_waits)


def test_a_request_answered_passes_through_untouched() -> None:
    sent = _run(_answers_200, cut=False)
    assert [m.get("status") for m in sent] == [200, None]


def _stop_seen_as_sent(app: Any, cut: bool) -> tuple[list[bool], bool]:
    """Run the wrapped ``app`` as ``_run`` does; the request's own stop (``cut_event``, as the route
    takes it from the same scope) as each message went out, and at the end."""
    scope, seen = dict(SCOPE), list[bool]()
    stop = cut_event(scope)

    async def send(message: Message) -> None:
        seen.append(stop.is_set())

    async def run() -> None:
        task = asyncio.ensure_future(CutAnswer(app)(scope, _receive, send))
        if cut:
            await asyncio.sleep(0.01)
            task.cancel()
        await task

    asyncio.run(run())
    return seen, stop.is_set()


def test_a_cut_request_s_own_stop_is_set_before_its_503_is_sent() -> None:
    """What the 503 says (a ``POST /schedule`` published nothing unless its publish was under way)
    holds from the moment it goes out: the route's plan reads the request's own stop beside the
    app's, which comes only after every cut (stop50)."""
    assert _stop_seen_as_sent(_waits_for_ever, cut=True) == ([True, True], True)
    assert _stop_seen_as_sent(_answers_200, cut=False) == ([False, False], False)


def test_a_cancel_outside_an_http_request_is_not_answered() -> None:
    """The app's lifespan (its start and stop), cancelled: no HTTP answer is sent to it (mutants13:
    only a websocket was passed through untouched, every test passing)."""
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    async def run() -> None:
        task = asyncio.ensure_future(CutAnswer(_waits_for_ever)({"type": "lifespan"}, _receive, send))
        await asyncio.sleep(0.01)
        task.cancel()
        await task

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(run())
    assert sent == []


async def _streams_then_waits(scope: Scope, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"[", "more_body": True})
    await asyncio.Event().wait()


def test_a_request_cut_after_its_first_body_part_keeps_its_cancel() -> None:
    """A response under way stays begun after its start (mutants13: begun only until the next
    message, a second response was sent after a body part, every test passing)."""
    with pytest.raises(asyncio.CancelledError):
        _cut(_streams_then_waits)


def test_a_request_cut_is_logged_once_with_its_path(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="service.http"):
        _cut(_waits_for_ever)
    [line] = [r for r in caplog.records if r.name == "service.http"]
    assert (line.getMessage(), line.__dict__["path"]) == (
        "request cut at the stop: answered 503",
        "/schedule",
    )

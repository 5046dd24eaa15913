"""A ``POST /schedule`` whose in-flight mark is extended too late (``service/pipeline/in_flight.py``).

The mark is written to lapse after the service's command timeout and extended to the request's
lifetime once its answer is in hand; an extension landing past that first window is refused
(``lua/planning.lua``), since a DELETE meanwhile may have found the id free. A replica starved
between the mark's answer and its extension meets it: the request must answer 503 (``LateMarkError``
is a ``redis.TimeoutError``: ``Retry-After``, and ``SchedulerClient`` retries), never plan or publish
on the lapsed mark, and take its entry back, so a DELETE once the id's other holders are gone is a
404 and the step sent again publishes.

The extension is held past the window by Redis itself, not by a sleep: between the mark's answer
and the extension, the request's thread pauses Redis's writes (``CLIENT PAUSE ... WRITE``) for longer
than the window and sends a write of its own, which Redis answers only once the pause has ended.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import redis

from service.delivery import Delivery, LateMarkError, keys
from service.settings import Settings
from tests.service.api.replicas import context, replicas
from tests.service.api_helpers import batch_body

LATE = keys.schedule_keys("late")
PAST_WINDOW_MS = 200  # how much longer than the mark's first window Redis's writes are paused
OTHER = "other-request"  # the entry of a request of the same id on another replica


def _held_past_the_window(mark: Callable[..., Any], redis_url: str, window_ms: int) -> Callable[..., Any]:
    """``mark`` (the delivery's ``mark_planning``), then, on the request's thread and for the first
    request only, a hold until Redis has let more than the mark's first window pass: its writes
    paused that long, and a write of the hold's own answered once the pause has ended."""
    held: list[bool] = []

    def then_hold(*args: Any, **kwargs: Any) -> Any:
        result = mark(*args, **kwargs)
        if held:
            return result
        held.append(True)
        with redis.Redis.from_url(redis_url, socket_timeout=60) as holder:
            holder.client_pause(window_ms + PAST_WINDOW_MS, all=False)
            holder.set(LATE.planning + ":hold", 1)  # answered as the pause ends
            holder.delete(LATE.planning + ":hold")
        return result

    return then_hold


def _raised_by(call: Callable[..., Any], raised: list[type[BaseException]]) -> Callable[..., Any]:
    """``call``, the type of whatever it raised appended to ``raised``."""

    def recorded(*args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except BaseException as error:
            raised.append(type(error))
            raise

    return recorded


def _post_late(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, after: Callable[[httpx.AsyncClient], Any]
) -> tuple[httpx.Response, list[type[BaseException]], Any]:
    """POST step ``late`` with its extension held past the mark's window; the answer, what the
    extension raised, and ``after(http)``'s result (awaited)."""
    window_ms = int(settings.redis_timeout_s * 1000)
    raised: list[type[BaseException]] = []

    async def run() -> tuple[httpx.Response, Any]:
        async with replicas(settings) as [http]:
            delivery = context(http).delivery
            held = _held_past_the_window(delivery.mark_planning, settings.redis_url or "", window_ms)
            monkeypatch.setattr(delivery, "mark_planning", held)
            monkeypatch.setattr(delivery, "extend_planning", _raised_by(delivery.extend_planning, raised))
            posted = await http.post("/schedule", json=batch_body(schedule_id="late"))
            return posted, await after(http)

    posted, then = asyncio.run(run())
    return posted, raised, then


def test_a_mark_extended_past_its_window_answers_503_and_leaves_the_id_free(
    live_settings: Settings, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def read_delete_then_resend(http: httpx.AsyncClient) -> tuple[int, int, int, int]:
        left = int(redis_client.exists(LATE.planning))
        read = await http.get("/schedule/late")  # nothing was planned or published
        deleted = await http.delete("/schedule/late")
        resent = await http.post("/schedule", json=batch_body(schedule_id="late"))
        return left, read.status_code, deleted.status_code, resent.status_code

    posted, raised, then = _post_late(live_settings, monkeypatch, read_delete_then_resend)
    assert raised == [LateMarkError]
    assert (posted.status_code, posted.json()["type"].rsplit("/", 1)[-1]) == (503, "redis-unavailable")
    assert "retry-after" in posted.headers
    assert then == (0, 404, 404, 200)


def test_a_mark_extended_past_its_window_is_taken_back_beside_another_request_s(
    live_settings: Settings, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another request of the id keeps the key alive past the late request's window, so only the
    late request's take-back removes its entry: a DELETE finds the id free once the other is done."""

    async def entries_then_delete(http: httpx.AsyncClient) -> tuple[list[str], int]:
        entries = sorted(str(key) for key in redis_client.hkeys(LATE.planning))
        other.unmark_planning("late", OTHER)  # the other request ends, refused
        return entries, (await http.delete("/schedule/late")).status_code

    other = Delivery(redis_client)
    other.mark_planning("late", OTHER, 60_000)
    posted, raised, then = _post_late(live_settings, monkeypatch, entries_then_delete)
    assert raised == [LateMarkError]
    assert posted.status_code == 503
    assert then == ([OTHER], 404)

"""When a request arrived: stamped in its ASGI scope before anything reads its body.

Why. The caller's deadline (``X-Envoy-Expected-Rq-Timeout-Ms``, ``service/pipeline/deadline.py``)
counts from when the caller's request reached the service: that is when its timeout (or its proxy's)
started. A route's handler runs only once its body has been read and parsed, and a 4,096 x 32 body with
long prompts is tens of MB: on a slow link or a loaded host its read took a good part of the caller's
time before the handler's clock started, so a plan could be given the whole deadline again and its 200
come after the caller had given up. The server calls the app once the request's head is in, and the
body is read later, through ``receive``: a stamp taken here, outermost, is the request's arrival.

Pure ASGI, not Starlette's ``BaseHTTPMiddleware`` (which runs the app in a task of its own and passes the
body and the response through memory streams): it only writes the stamp and calls the app. A stamp
already in the scope (an outer app's, which saw the request first) is kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

SCOPE_KEY = "rollout.arrival"  # the scope's entry: a namespaced name no server or framework sets

Clock = Callable[[], float]


@dataclass(frozen=True)
class Arrival:
    """When the request arrived, ``at`` on ``clock`` (``time.perf_counter`` but in tests): a deadline
    counted from it is read on the same clock."""

    at: float
    clock: Clock = time.perf_counter


class ArrivalStamp:
    """Stamp each HTTP request's ``Arrival`` in its scope (``SCOPE_KEY``) as it comes in, before its
    body is read; ``clock``: what arrivals, and the deadlines counted from them, are read on."""

    def __init__(self, app: ASGIApp, clock: Clock = time.perf_counter) -> None:
        self.app = app
        self.clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Stamp the request (unless an outer app did), then pass it on unchanged."""
        if scope["type"] == "http" and SCOPE_KEY not in scope:
            scope[SCOPE_KEY] = Arrival(self.clock(), self.clock)
        await self.app(scope, receive, send)


def arrival_of(scope: Scope) -> Arrival:
    """The request's stamped arrival; now, on the wall clock, for a request no ``ArrivalStamp`` saw (an
    app built without one: its handler's start is the earliest moment known)."""
    stamped = scope.get(SCOPE_KEY)
    return stamped if isinstance(stamped, Arrival) else Arrival(time.perf_counter())

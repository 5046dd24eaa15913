"""``ArrivalStamp`` stamps HTTP requests only: a lifespan or websocket scope is passed on as it came,
and an HTTP request's stamp is read on the middleware's own clock."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from service.arrival import SCOPE_KEY, Arrival, ArrivalStamp


async def _nothing() -> dict[str, Any]:
    return {}


async def _dropped(message: Any) -> None:
    del message


def _passed_on(scope: dict[str, Any]) -> dict[str, Any]:
    """The scope the app behind the middleware (on a clock at 7 s) is called with."""
    seen: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope)

    asyncio.run(ArrivalStamp(app, clock=lambda: 7.0)(scope, _nothing, _dropped))
    return seen[0]


@pytest.mark.parametrize("kind", ["lifespan", "websocket"])
def test_a_scope_that_is_no_http_request_is_not_stamped(kind: str) -> None:
    assert SCOPE_KEY not in _passed_on({"type": kind})


def test_an_http_request_is_stamped_on_the_middlewares_clock() -> None:
    stamped = _passed_on({"type": "http"})[SCOPE_KEY]
    assert isinstance(stamped, Arrival)
    assert (stamped.at, stamped.clock()) == (7.0, 7.0)

"""Request-size limits: oversized bodies get 413 before they are read in full.

A declared ``Content-Length`` over the limit is refused before one body byte is read; a chunked body
is read only up to the limit, then refused. Either way the route never runs, so nothing is parsed,
planned or written. The trajectory-count limit (``max_trajectories``) is checked after parsing, in
``check_trajectory_count``, because only the parsed batch knows its sum of ``n``.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.problems import PayloadTooLargeError, problem_response


class BodyLimitMiddleware:
    """Pure ASGI middleware (no buffering beyond the limit) enforcing ``max_bytes`` per request body."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass small requests through unchanged; answer 413 for large ones without calling the app."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None:
            if declared > self.max_bytes:
                await self._refuse(scope, receive, send, f"declared Content-Length {declared}")
                return
            await self.app(scope, receive, send)
            return
        await self._chunked(scope, receive, send)

    async def _chunked(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Read a body of unknown length up to the limit, then replay it to the app."""
        messages: list[Message] = []
        size = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                await self._refuse(scope, receive, send, f"more than {self.max_bytes} bytes received")
                return
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, what: str) -> None:
        error = PayloadTooLargeError(f"request body too large: {what}; the limit is {self.max_bytes} bytes")
        response = problem_response(
            413,
            "Payload too large",
            error.detail,
            slug="payload-too-large",
            instance=str(scope.get("path", "")),
            headers={"Connection": "close"},
        )
        await response(scope, receive, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def check_trajectory_count(total: int, limit: int) -> None:
    """Refuse a batch asking for more than ``limit`` trajectories (sum of ``n``) with 413."""
    if total > limit:
        raise PayloadTooLargeError(
            f"batch asks for {total} trajectories; the limit is {limit}",
            field="batch.items",
            value=total,
        )

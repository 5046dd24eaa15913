"""Request limits: oversized bodies get 413 before they are read in full; plans run a few at a time.

A declared ``Content-Length`` over the limit is refused before one body byte is read; every body is
also counted as the route reads it (after the caller's token passed) and cut off at the limit, since
a declared length is not always the length read: beside ``Transfer-Encoding: chunked`` the server
reads the chunks, whatever ``Content-Length`` says (RFC 9112, 6.3), and a small one there had let a
body of any size through. Either way nothing is parsed, planned or written. The trajectory-count
limit (``max_trajectories``) is checked after parsing, in ``check_trajectory_count``, because only
the parsed batch knows its sum of ``n``.

Planning is CPU-bound: forty plans at once on two cores would each take twenty times longer and all
miss their budgets. ``PlanSlots`` lets a few run and queues the rest (first come, first served, up to
a timeout, then 503 with ``Retry-After``; or to the caller's deadline, if sooner, then 504; or to the
replica's stop, then 503), so latency stays predictable under a burst.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.pipeline.deadline import NO_DEADLINE, Deadline
from service.problems.table import PayloadTooLargeError, UnavailableError, lookup, problem_response


def _problem_413(path: str, what: str, max_bytes: int) -> Response:
    """The service's 413: a problem from its one table, naming the setting that raises the limit."""
    error = PayloadTooLargeError(
        f"request body too large: {what}; the limit is {max_bytes} bytes "
        "(ROLLOUT_MAX_BODY_BYTES; split the batch, or raise the limit)"
    )
    problem = lookup(error)  # outside FastAPI's handlers, but answered from the same table
    return problem_response(
        problem.status,
        problem.title,
        error.detail,
        slug=problem.slug,
        instance=path,
        headers={"Connection": "close"},
    )


Refusal = Callable[[str, str, int], Response]  # (path, what was too large, the limit) -> the 413


class BodyLimitMiddleware:
    """Pure ASGI middleware (no buffering beyond the limit) enforcing ``max_bytes`` per request body.

    ``refusal`` renders the 413 in the app's own error shape: the service's problem by default; the
    sidecar's pull API answers ``{"error"}`` as all its errors, without the service's setting."""

    def __init__(self, app: ASGIApp, max_bytes: int, refusal: Refusal = _problem_413) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.refusal = refusal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass small requests through unchanged; answer 413 for large ones without calling the app."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(scope, receive, send, f"declared Content-Length {declared}")
            return
        await self._counted(scope, receive, send)

    async def _counted(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Count the body as the app reads it; past the limit, cut it off and answer 413.

        Counted, not read ahead: the app reads the body only after the caller's token passed
        (``AuthFirstRoute``), so a caller without one cannot make the service hold a chunked body
        (reading it first let 60 such uploads hold 2 GB). The app's own answer to a body cut short
        (a disconnect) is replaced by the 413."""
        size, cut = 0, False

        async def counted() -> Message:
            nonlocal size, cut
            if cut:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                size += len(message.get("body", b""))
                if size > self.max_bytes:
                    cut = True
                    return {"type": "http.disconnect"}
            return message

        async def unless_cut(message: Message) -> None:
            if not cut:
                await send(message)

        try:
            await self.app(scope, counted, unless_cut)
        except Exception:
            if not cut:
                raise
        if cut:
            await self._refuse(scope, receive, send, f"more than {self.max_bytes} bytes received")

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, what: str) -> None:
        response = self.refusal(str(scope.get("path", "")), what, self.max_bytes)
        await response(scope, receive, send)


def _content_length(scope: Scope) -> int | None:
    """The declared body length; None when there is none to trust: absent, unreadable, or beside a
    ``Transfer-Encoding``, which the server reads the body by instead."""
    headers = scope.get("headers", [])
    if any(name == b"transfer-encoding" for name, _ in headers):
        return None
    for name, value in headers:
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
            f"batch asks for {total} trajectories; the limit is {limit} (ROLLOUT_MAX_TRAJECTORIES)",
            field="batch.items",
            value=total,
        )


class PlanSlots:
    """At most ``size`` plans at once; others wait up to ``timeout_s`` for a slot, or until the
    replica stops (``stop``)."""

    def __init__(self, size: int, timeout_s: float) -> None:
        self._changed = threading.Condition()  # a semaphore's, with the stop beside its count
        self._free = size
        self._stopped = False
        self.size = size
        self.timeout_s = timeout_s

    def stop(self) -> None:
        """The replica stops (``Startup.halt``): every request waiting for a slot is refused now, 503
        "the replica is stopping", and so is any that comes after. Nobody reads those answers any more
        (their handlers were cancelled), and a wait went on until a plan ahead gave its slot back, up
        to the plan queue's timeout (30 s by default) behind a plan that did not give up soon, its
        planning thread, and the process's exit, held as long."""
        with self._changed:
            self._stopped = True
            self._changed.notify_all()

    @contextmanager
    def hold(self, arrived: float | None = None, until: Deadline = NO_DEADLINE) -> Iterator[float]:
        """Hold a slot for the block; yields the seconds spent waiting for it here.

        ``arrived`` (a ``time.perf_counter()`` reading, by default now): when the request came in.
        The timeout counts from then, so a request that waited for a planning thread first
        (``Context.plan_threads``) waits here only what is left of it: counted from here, each
        16 requests in line before it had added a whole timeout to its wait (README: the timeout
        is the longest wait). A slot free when it gets here is taken, whatever the time.

        ``until``: the caller's deadline (``service/pipeline/deadline.py``), when it comes first, ends
        the wait there, refused 504 ``deadline-exceeded``: the caller has stopped waiting, and a
        request held in line for the rest of the timeout (30 s by default) only kept the requests
        behind it out of the slots it would then have been refused after. The replica's stop ends it
        too (``stop``)."""
        started = time.perf_counter()
        timeout_s = (started if arrived is None else arrived) + self.timeout_s - started  # what is left
        given_up_s = until.left_s()  # on the deadline's own clock (a test's may not be the wall's)
        late = given_up_s <= timeout_s  # the caller gives up first
        if not self._taken(max(0.0, min(given_up_s, timeout_s))):
            if late:
                raise until.exceeded("passed while it waited in line for a plan slot")
            raise UnavailableError(
                f"busy: {self.size} plans running and none finished within {self.timeout_s:g} s; retry"
            )
        try:
            yield time.perf_counter() - started
        finally:
            with self._changed:
                self._free += 1
                self._changed.notify()

    def _taken(self, wait_s: float) -> bool:
        """Take a slot, waiting up to ``wait_s`` for one; False if none freed. Raises the 503 once the
        replica stops."""
        with self._changed:
            free = self._changed.wait_for(lambda: self._stopped or self._free > 0, wait_s)
            if self._stopped:
                raise UnavailableError("the replica is stopping: the request was not planned; retry")
            if free:
                self._free -= 1
            return free

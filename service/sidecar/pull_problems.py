"""How the sidecar's pull API answers an error: one table from exception type to status and body.

Routes raise, never build an error response; every answer is ``{"error": ...}`` (a gone schedule's
also says its ``outcome``; a refused body's its ``field``, ``value`` and ``errors`` as the service's
problem does, its ``error`` the service's ``detail``), as documented in docs/sidecar.md, including
the answers of the middlewares outside FastAPI's handlers (a body too large, a request the
shutdown's drain gave up on) and Starlette's own (an unknown path, a wrong method, a body it cannot
decode). The routes themselves are ``pull_api``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import redis
from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis.exceptions import RedisClusterException
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match

from service.delivery.errors import REDIS_FAILED, UnknownScheduleError
from service.hosts.names import refused_host
from service.problems.details import clipped, echo, validation_details
from service.problems.table import (
    JSON_HINT,
    AsciiJSONResponse,
    BodyEncodingError,
    ContentCodingError,
    MisdirectedHostError,
    PayloadTooLargeError,
    is_json,
)
from service.sidecar.connecting import CONNECTING_RETRY_AFTER_S, ConnectingError
from service.sidecar.pull_bodies import AboveCapError
from service.sidecar.pull_drain import DrainCutError

# Every error the pull API answers, in one place: exception type -> status and the body documented in
# docs/sidecar.md (``{"error": ...}``; a gone schedule also says its ``outcome``). Routes raise, never
# build an error response; ``problem`` answers with the entry of the exception's nearest class.
PROBLEMS: dict[type[Exception], tuple[int, Callable[[Exception], dict[str, Any]]]] = {
    AboveCapError: (422, lambda exc: _above_cap(exc)),
    # a body in UTF-16 or UTF-32 (or no encoding at all), which FastAPI's decoder would have read
    BodyEncodingError: (400, lambda exc: {"error": f"body: {exc}"}),
    # a body past MAX_BODY_BYTES, declared or counted (``BodyLimitMiddleware``, ``too_large``)
    PayloadTooLargeError: (413, lambda exc: {"error": f"body: {exc}"}),
    # a Host other than localhost, 127.0.0.1 or [::1] (DNS rebinding; ``service/hosts/allow_list.py``)
    MisdirectedHostError: (421, lambda exc: {"error": str(exc)}),
    # a body sent compressed (Content-Encoding), which nothing here decodes: refused unread
    ContentCodingError: (415, lambda exc: {"error": str(exc)}),
    # a malformed body or query: the service's 422 in this API's ``error`` (``_invalid``)
    RequestValidationError: (422, lambda exc: _invalid(exc)),
    # a request still running when the shutdown's drain timeout ran out (``pull_drain``)
    DrainCutError: (503, lambda exc: {"error": str(exc)}),
    # Redis unreachable or failing: retry later, the lease is kept
    redis.RedisError: (503, lambda exc: {"error": f"redis unavailable: {exc}"}),
    # a Redis Cluster client's own (no RedisError): a slot not covered mid-reshard, its slot map rebuilt
    RedisClusterException: (503, lambda exc: {"error": f"redis unavailable: {exc}"}),
    # start-up still waits for Redis (a cluster down when the sidecar started): retry later
    ConnectingError: (503, lambda exc: {"error": str(exc)}),
    # never published here, or its retention passed while the worker ran it: drop the result
    UnknownScheduleError: (404, lambda exc: {"outcome": "unknown_schedule", "error": _unknown(exc)}),
    # Starlette's own: an unknown path (404), a wrong method (405, its Allow kept), a body FastAPI
    # cannot decode (400); the status is the exception's, the body completed by ``_http_error``
    StarletteHTTPException: (0, lambda exc: {"error": str(getattr(exc, "detail", exc))}),
}


# the 503s a worker is to retry, with the seconds ``Retry-After`` asks it to wait first: a report the
# sidecar cannot take yet (Redis out, or not reached since start: a restarted sidecar connecting) lands
# on a retry, and one dropped instead left its lease to be handed back and the finished work run again
RETRY_AFTER_S: dict[type[Exception], int] = {
    **dict.fromkeys(REDIS_FAILED, 1),
    ConnectingError: CONNECTING_RETRY_AFTER_S,
}


def too_large(path: str, what: str, max_bytes: int) -> Response:
    """The 413 of ``BodyLimitMiddleware`` (outside FastAPI's handlers) from the table, as every error
    here: it was the service's problem, without ``error``, advising a setting the sidecar does not
    read. The connection is closed: the rest of the body is left unread."""
    status, body = PROBLEMS[PayloadTooLargeError]
    error = PayloadTooLargeError(f"too large ({what}); the limit is {max_bytes} bytes")
    return JSONResponse(body(error), status_code=status, headers={"Connection": "close"})


def misdirected(path: str, sent: str | None) -> Response:
    """The 421 of ``HostAllowList`` (outside FastAPI's handlers), from the table as every error here:
    a ``Host`` other than a loopback name is a web page's own name re-pointed at 127.0.0.1 (DNS
    rebinding), which could otherwise take work and report results as this worker."""
    del path
    status, body = PROBLEMS[MisdirectedHostError]
    return JSONResponse(body(MisdirectedHostError(refused_host(sent))), status_code=status)


def cut_short(drain_s: float, hurried: bool = False) -> Response:
    """The 503 of a request the drain gave up on (``DrainBoundMiddleware``, outside FastAPI's
    handlers), at its timeout or at a second signal (``hurried``), from the table as every error
    here; the connection closes with the server."""
    status, body = PROBLEMS[DrainCutError]
    return JSONResponse(body(DrainCutError(drain_s, hurried)), status_code=status)


def _unknown(exc: Exception) -> str:
    """An unknown schedule's error, naming its id as the worker sent it cut short (``clipped``)."""
    return str(UnknownScheduleError(clipped(getattr(exc, "schedule_id", ""))))


def _invalid(exc: Exception) -> dict[str, Any]:
    """A refused body or query as the service's 422 says it (``validation_details``): ``error`` its
    ``detail`` (``output_tokens=5.5: expected an integer``, the first field at fault and its value,
    ``(and N more)``), and ``field``, ``value`` and ``errors[]`` as its problem has them. It was
    ``field: message`` for every error, ``; ``-joined, without the value, and a query's field named
    ``query.wait_s``: a bad ``/done`` read unlike a bad ``/schedule`` (user66). No input is echoed
    whole (NaN is named as text, a long value by its start and size, ``details.echo``)."""
    errors = exc.errors() if isinstance(exc, RequestValidationError) else []
    detail, extra = validation_details(errors)
    return {"error": detail, **extra}


def _above_cap(exc: Exception) -> dict[str, Any]:
    """A ``/done`` past its item's cap, led, located and listed as a refused body field is
    (``_invalid``): ``errors[]`` too, which docs/sidecar.md gives every 422 (it had none: review67)."""
    assert isinstance(exc, AboveCapError)
    fault = {"field": "output_tokens", "message": exc.words, "type": "value_error"}
    return {"error": str(exc), "field": "output_tokens", "value": echo(exc.output_tokens), "errors": [fault]}


def problem(request: Request, exc: Exception, routes: Sequence[BaseRoute]) -> JSONResponse:
    """The response ``PROBLEMS`` maps ``exc`` to (Starlette picks a handler by the same MRO walk) on
    an API of ``routes``; a malformed body that was not sent as JSON says so, as the service's
    problems do (a bad query string, which no content type explains, does not)."""
    status, body = next(PROBLEMS[kind] for kind in type(exc).__mro__ if kind in PROBLEMS)
    answer = body(exc)
    if isinstance(exc, RequestValidationError) and _body_not_json(request, exc):
        answer["error"] += JSON_HINT
    if isinstance(exc, StarletteHTTPException):
        answer["error"] = _http_error(request, exc, routes)
        return JSONResponse(answer, status_code=exc.status_code, headers=_allow(request, exc, routes))
    return AsciiJSONResponse(answer, status_code=status, headers=_retry_after(exc))


def _retry_after(exc: Exception) -> Mapping[str, str] | None:
    """``Retry-After`` for an error the worker is to retry (``RETRY_AFTER_S``), else no header."""
    wait_s = next((RETRY_AFTER_S[kind] for kind in type(exc).__mro__ if kind in RETRY_AFTER_S), None)
    return None if wait_s is None else {"Retry-After": str(wait_s)}


def _http_error(request: Request, exc: StarletteHTTPException, routes: Sequence[BaseRoute]) -> str:
    """Starlette's error in the API's own shape (its ``{"detail"}`` was the one answer here without
    ``error``), naming the request: a path with a trailing slash names the path to send instead, and
    a body FastAPI could not decode (nested past the recursion limit) names ``body`` and the cause."""
    said = f"{request.method} {clipped(request.url.path)}: {exc.detail}"
    path = request.url.path
    paths = {getattr(route, "path", "") for route in routes}
    if exc.status_code == 404 and len(path) > 1 and path.rstrip("/") in paths:
        return f"{said}; the path takes no trailing slash: {path.rstrip('/')}"
    if exc.status_code == 400:
        cause = f" ({exc.__cause__})" if exc.__cause__ is not None else ""
        return f"body: {exc.detail}{cause}"
    return said


def _allow(
    request: Request, exc: StarletteHTTPException, routes: Sequence[BaseRoute]
) -> Mapping[str, str] | None:
    """``exc``'s headers, a 405's ``Allow`` naming the methods of every route on the path: the probes'
    ``GET`` and ``HEAD`` are two routes, and Starlette names the first one's only (RFC 9110 15.5.6)."""
    if exc.status_code != 405:
        return exc.headers
    methods = {
        method
        for route in routes
        if route.matches(request.scope)[0] != Match.NONE
        for method in getattr(route, "methods", None) or ()
    }
    return {**(exc.headers or {}), "Allow": ", ".join(sorted(methods))}


def _body_not_json(request: Request, exc: RequestValidationError) -> bool:
    """Whether the refused part was a body sent without a JSON content type (not a query string)."""
    refused_body = any(error["loc"][:1] == ("body",) for error in exc.errors())
    return refused_body and not is_json(request.headers.get("content-type", ""))

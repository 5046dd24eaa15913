"""RFC 9457 problem responses: the service's error types and ONE table mapping each to an HTTP answer.

Routes never build error responses: they (or the core under them) raise a typed exception, and the
table below decides its status and title. Every body is ``application/problem+json`` with ``type``,
``title``, ``status``, ``detail``, ``instance`` and, when one input is at fault, ``field`` (a dotted
path such as ``batch.items[3].prompt_tokens``) and ``value``; request-validation failures also list
every ``errors[]`` entry. A client can therefore fix its request without reading server logs.
How that field and value are rendered (pydantic's locations, long values cut short) is
``service.problems.details``'.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import redis
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from redis.exceptions import RedisClusterException
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from scheduler.errors import InvalidInputError
from service.delivery.errors import REDIS_FAILED, MarkLapsedError, ScheduleConflictError, UnknownScheduleError
from service.logs import already_logged, request_schedule_id, schedule_context
from service.problems.details import echo, shortened, validation_details
from service.redis_conn import RedisTooOldError

PROBLEM_JSON = "application/problem+json"
_log = logging.getLogger("service.problems")


class AsciiJSONResponse(JSONResponse):
    """JSON rendered as ASCII, NaN refused: a 422 echoes the input at fault, and an input may hold a lone
    UTF-16 surrogate (valid in JSON, not in UTF-8), which the default rendering fails on with a 500.
    The one rendering of the service's problems and the sidecar pull API's answers."""

    def render(self, content: Any) -> bytes:
        """Compact, ASCII-only JSON (non-ASCII text as ``\\uXXXX`` escapes)."""
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


class ProblemResponse(AsciiJSONResponse):
    """A problem rendered as ``AsciiJSONResponse`` does, typed ``application/problem+json``."""

    media_type = PROBLEM_JSON


class ServiceError(Exception):
    """Base of the service's own request-level errors; ``field``/``value`` locate the culprit."""

    def __init__(self, detail: str, *, field: str | None = None, value: object = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.field = field
        self.value = value


class BodyEncodingError(ServiceError):
    """A request body that is not UTF-8 (UTF-16 or UTF-32, or bytes no encoding reads), though the
    JSON decoder would have read some of them (``service/body_encoding.py``)."""


class ContentCodingError(ServiceError):
    """A request body sent with a content coding (``Content-Encoding: gzip``): the service reads
    bodies as sent, so it would read the compressed bytes as the JSON (``service/body_encoding.py``)."""


class UnauthorizedError(ServiceError):
    """No bearer token, or one the service does not know."""


class ForbiddenError(ServiceError):
    """A known token whose scope does not cover this endpoint."""


class MisdirectedHostError(ServiceError):
    """A request whose ``Host`` names no name a server without tokens answers to: a web page's own
    name re-pointed at loopback (DNS rebinding, ``service/hosts/allow_list.py``)."""


class PayloadTooLargeError(ServiceError):
    """The body, or the number of trajectories it asks for, is over the configured limit."""


class NotFoundError(ServiceError):
    """The schedule, model version or route does not exist."""


class ConflictError(ServiceError):
    """The request is valid but clashes with the current state (a retrain already running)."""


class StepCutShortError(ConflictError):
    """Actuals naming a step cancelled before it finished: its results are the trajectories that
    finished first, the short ones, and would teach the predictor lengths biased short
    (``service/api/actuals.py``). The batch may say it is ``partial`` to be stored anyway."""


class StepWithdrawnError(ConflictError):
    """A request under a ``schedule_id`` that a DELETE withdrew while its step was in flight, before
    it was published (``service/pipeline/republish.py``): nothing was published, so there is nothing
    to follow, unlike the other 409s on ``schedule_id``; the step must be sent under a new id. Its
    own problem type so a client tells the two apart (``service/client/wire.py``, ``WithdrawnError``)."""


class DeadlineExceededError(ServiceError):
    """A ``POST /schedule`` whose caller's deadline (``service/pipeline/deadline.py``) passed before it
    could publish: refused with nothing written, as the proxy in front would have cut it (504)."""


class UnavailableError(ServiceError):
    """A dependency (Redis, the model) cannot serve right now; retrying later will work."""


class ModelStoreError(UnavailableError):
    """The model store (``ROLLOUT_MODEL_DIR``) cannot be listed or written: a lost or read-only
    volume. Its detail names the store; the model in memory keeps serving meanwhile."""


class RetrainStoppedError(UnavailableError):
    """A retrain given up because its replica is stopping (``service.learning.retrain``): it stored
    nothing, and another replica, or this one restarted, retrains."""


@dataclass(frozen=True, slots=True)
class Problem:
    """How one exception type is answered."""

    status: int
    title: str
    slug: str  # last part of the problem ``type`` URI


# The table. Order matters: the first matching base class wins, so subclasses come first.
PROBLEMS: tuple[tuple[type[Exception], Problem], ...] = (
    (RequestValidationError, Problem(422, "Invalid request", "invalid-request")),
    (InvalidInputError, Problem(422, "Invalid request", "invalid-request")),
    (BodyEncodingError, Problem(400, "Bad Request", "body-not-utf8")),
    (ContentCodingError, Problem(415, "Unsupported Media Type", "unsupported-content-encoding")),
    (UnauthorizedError, Problem(401, "Unauthorized", "unauthorized")),
    (ForbiddenError, Problem(403, "Forbidden", "forbidden")),
    (PayloadTooLargeError, Problem(413, "Payload too large", "payload-too-large")),
    # RFC 9110 15.5.20: the server will not answer for the authority named (the request is well formed)
    (MisdirectedHostError, Problem(421, "Misdirected Request", "host-not-allowed")),
    (NotFoundError, Problem(404, "Not found", "not-found")),
    (UnknownScheduleError, Problem(404, "Unknown schedule", "unknown-schedule")),
    (StepCutShortError, Problem(409, "Step cut short", "step-cut-short")),
    (StepWithdrawnError, Problem(409, "Step withdrawn", "step-withdrawn")),
    (ConflictError, Problem(409, "Conflict", "conflict")),
    (ScheduleConflictError, Problem(409, "Conflict", "conflict")),
    (DeadlineExceededError, Problem(504, "Deadline exceeded", "deadline-exceeded")),
    (ModelStoreError, Problem(503, "Model store unavailable", "model-store-unavailable")),
    (UnavailableError, Problem(503, "Service unavailable", "unavailable")),
    # a publish whose in-flight mark lapsed while Redis failed its keeps: nothing written, and a retry
    # under the id marks it again, as one whose mark Redis failed at arrival (service/pipeline/in_flight.py)
    (MarkLapsedError, Problem(503, "In-flight mark lapsed", "mark-lapsed")),
    # a Redis older than 7.0: only an upgrade and a restart of the service fix it (no Retry-After)
    (RedisTooOldError, Problem(503, "Redis too old", "redis-too-old")),
    # the service's Redis user or password is wrong: an operator must fix it, but the request is fine
    # (AuthenticationError is a ConnectionError, so it comes before that)
    (redis.exceptions.NoPermissionError, Problem(503, "Redis refused access", "redis-refused")),
    (redis.exceptions.AuthenticationError, Problem(503, "Redis refused access", "redis-refused")),
    (redis.ConnectionError, Problem(503, "Redis unavailable", "redis-unavailable")),
    (redis.TimeoutError, Problem(503, "Redis unavailable", "redis-unavailable")),
    (redis.BusyLoadingError, Problem(503, "Redis unavailable", "redis-unavailable")),
    (redis.exceptions.ReadOnlyError, Problem(503, "Redis unavailable", "redis-unavailable")),  # failover
    # a Redis Cluster that cannot serve the command's slot now: CLUSTERDOWN (a slot with no master, a
    # master failing over), TRYAGAIN (a slot mid-reshard), and the cluster client's own errors, which
    # are no RedisError (``SlotNotCoveredError``; its slot map being rebuilt): a retry will meet it served
    (redis.exceptions.ClusterDownError, Problem(503, "Redis unavailable", "redis-unavailable")),
    (redis.exceptions.TryAgainError, Problem(503, "Redis unavailable", "redis-unavailable")),
    (RedisClusterException, Problem(503, "Redis unavailable", "redis-unavailable")),
    (redis.exceptions.OutOfMemoryError, Problem(503, "Redis out of memory", "redis-out-of-memory")),
    # a MULTI whose queued command was refused (under maxmemory: OOM); nothing of it ran
    (redis.exceptions.ExecAbortError, Problem(503, "Redis out of memory", "redis-out-of-memory")),
)


class ProblemBody(BaseModel):
    """The body of every error answer, for the OpenAPI document (``handle`` builds it as a dict)."""

    type: str  # https://rollout-scheduler.dev/problems/<slug>
    title: str
    status: int
    detail: str  # what is wrong, naming the input at fault
    instance: str  # the request path
    field: str | None = None  # dotted path of the input at fault, e.g. batch.items[3].prompt_tokens
    value: Any = None  # that input's value, when JSON can carry it
    errors: list[dict[str, str]] | None = None  # request validation: one {field, message, type} each


def documented(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """A route's ``responses=``: each error status it can answer, as ``application/problem+json``.

    Declaring 422 here also replaces FastAPI's own entry, which would say ``application/json``.
    Statuses outside the table are Starlette's own (400: a body that cannot be decoded).
    """
    titles = {problem.status: problem.title for _, problem in reversed(PROBLEMS)}
    schema = ProblemBody.model_json_schema()
    return {
        s: {"description": titles.get(s, HTTPStatus(s).phrase), "content": {PROBLEM_JSON: {"schema": schema}}}
        for s in statuses
    }


def lookup(exc: Exception) -> Problem:
    """The table's entry for ``exc`` (500 when nothing matches)."""
    for kind, problem in PROBLEMS:
        if isinstance(exc, kind):
            return problem
    return Problem(500, "Internal server error", "internal")


def problem_response(
    status: int,
    title: str,
    detail: str,
    *,
    slug: str,
    instance: str = "",
    extra: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """Build one problem+json response (also used by the body-limit middleware, outside FastAPI)."""
    body: dict[str, Any] = {
        "type": f"https://rollout-scheduler.dev/problems/{slug}",
        "title": title,
        "status": status,
        "detail": detail,
        "instance": instance,
        **(extra or {}),
    }
    return ProblemResponse(body, status_code=status, headers=headers)


def _details(exc: Exception) -> tuple[str, dict[str, Any]]:
    """The ``detail`` text and the field-locating extras of ``exc``."""
    if isinstance(exc, RequestValidationError):
        return validation_details(exc.errors())
    if isinstance(exc, InvalidInputError):
        short = shortened(exc.value)  # the core's message repeats the value whole
        detail = str(exc) if short is None else f"{exc.field}={short}: {exc.reason}"
        return detail, {"field": exc.field, "value": echo(exc.value)}
    if isinstance(exc, MarkLapsedError):
        return f"{exc}; nothing was published: retry under the same schedule_id", {
            "field": "schedule_id",
            "value": exc.schedule_id,
        }
    if isinstance(exc, (ScheduleConflictError, UnknownScheduleError)):
        return str(exc), {"field": "schedule_id", "value": exc.schedule_id}
    if isinstance(exc, ServiceError):
        extra = {"field": exc.field, "value": echo(exc.value)} if exc.field else {}
        return exc.detail, extra
    if isinstance(exc, RedisTooOldError):
        return f"{exc}; upgrade it, then restart the service", {}
    if lookup(exc).slug == "redis-out-of-memory":
        return f"Redis refused a write, out of memory ({exc}); retry once it has room", {}
    if lookup(exc).slug == "redis-refused":
        return f"Redis refused the service's user ({type(exc).__name__}: {exc}); an operator must fix it", {}
    if isinstance(exc, REDIS_FAILED) and lookup(exc).status == 503:
        return f"Redis is unreachable ({type(exc).__name__}: {exc}); retry shortly", {}
    if lookup(exc).status < 500:
        return str(exc), {}  # a listed domain error: its message is meant for the caller
    return "an unexpected error occurred; see the service log", {}


# What a refused body adds when it was not sent as JSON: ``curl -d`` sends a form by default, and
# "Input should be a valid dictionary" alone did not say that the JSON in it was never read as JSON.
# The service's problems and the sidecar's pull API both say it.
JSON_HINT = "; send the body as JSON, with 'Content-Type: application/json'"


async def handle(request: Request, exc: Exception) -> JSONResponse:
    """The one exception handler: look ``exc`` up in the table and answer with a problem."""
    problem = lookup(exc)
    detail, extra = _details(exc)
    if extra.get("field") == "body" and not is_json(request.headers.get("content-type", "")):
        detail += JSON_HINT
    # a 500 is logged by the server, traceback and all (Starlette re-raises it); a failure its own
    # code logged already (``mark_logged``: a failed retrain) is not logged twice
    if problem.status > 500 and not already_logged(exc):
        with schedule_context(request_schedule_id(request.scope)):
            _log_failure(problem, exc, detail)
    headers = {"WWW-Authenticate": "Bearer"} if problem.status == 401 else None
    if problem.status == 415:  # the codings a body may be sent in (RFC 9110, 12.5.3): identity alone
        headers = {"Accept-Encoding": "identity"}
    if problem.status == 503 and problem.slug != "redis-too-old":
        headers = {"Retry-After": "1"}
    return problem_response(
        problem.status,
        problem.title,
        detail,
        slug=problem.slug,
        instance=request.url.path,
        extra=extra,
        headers=headers,
    )


def _log_failure(problem: Problem, exc: Exception, detail: str) -> None:
    """The one line a failed request (5xx) gets. A refused Redis user is an error for the operator,
    naming where to fix it, and nothing more: it was that error and then ``request failed`` too, one
    failure as two lines, and the error without the request's ``schedule_id``."""
    if problem.slug == "redis-refused":
        _log.error("Redis refused the service's user: %s (see docs/operations.md, Redis ACL)", exc)
    else:
        _log.warning("request failed: %s", detail)


def is_json(content_type: str) -> bool:
    """``application/json`` or a ``+json`` type, parameters aside: what FastAPI parses as JSON."""
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


async def handle_http(request: Request, exc: Exception) -> JSONResponse:
    """Starlette's own errors (unknown route, wrong method, a body FastAPI cannot parse) as problems.

    FastAPI answers 400 for a body it cannot decode at all (JSON nested past Python's recursion
    limit, a number past its 4,300-digit limit; a body not in UTF-8 is refused before FastAPI reads
    it, ``service/body_encoding.py``); that one is the body's fault, so it names ``body`` as a 422
    would, and says which of these it was (``_decode_cause``).
    """
    assert isinstance(exc, StarletteHTTPException)
    extra = {"field": "body"} if exc.status_code == 400 else None
    return problem_response(
        exc.status_code,
        HTTPStatus(exc.status_code).phrase,
        f"{request.method} {request.url.path}: {exc.detail}{_decode_cause(exc)}{_slash_hint(request, exc)}",
        slug="http",
        instance=request.url.path,
        extra=extra,
        headers=_allow(request, exc),
    )


def _allow(request: Request, exc: StarletteHTTPException) -> dict[str, str]:
    """``exc``'s headers, with a 405's ``Allow`` naming the methods of every route on the path.

    Starlette names only the first route whose path matched, and a path here may have several: the
    probes' ``GET`` and ``HEAD`` are two routes, ``/schedule/{id}`` takes ``GET`` and ``DELETE``. So
    a 405 said ``Allow: HEAD`` for ``/healthz`` and ``Allow: GET`` for ``/schedule/{id}``, against
    RFC 9110 (15.5.6: the methods the resource supports) and docs/api.md. The routes are the app's
    flat list (``app.state.routes``, ``create_app``): FastAPI keeps an included router as one entry."""
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        routes = getattr(request.app.state, "routes", request.app.router.routes)
        methods = {
            method
            for route in routes
            if route.matches(request.scope)[0] != Match.NONE
            for method in getattr(route, "methods", None) or ()
        }
        headers["Allow"] = ", ".join(sorted(methods)) or headers.get("Allow", "")
    return headers


def _slash_hint(request: Request, exc: StarletteHTTPException) -> str:
    """What a 404 for a path with a trailing slash adds when the path without it is a route's: the
    app redirects no slash (``create_app``), so the caller is told the path to send instead."""
    path = request.scope["path"]
    if exc.status_code != 404 or len(path) < 2 or not path.endswith("/"):
        return ""
    bare = {**request.scope, "path": path.rstrip("/")}
    routes = getattr(request.app.state, "routes", request.app.router.routes)
    if not any(route.matches(bare)[0] != Match.NONE for route in routes):
        return ""
    return f"; the path takes no trailing slash: {bare['path']}"


def install(app: FastAPI) -> None:
    """Register the table's handler for every listed type, plus a catch-all for the unexpected."""
    for kind, _ in PROBLEMS:
        app.add_exception_handler(kind, handle)
    app.add_exception_handler(StarletteHTTPException, handle_http)
    app.add_exception_handler(Exception, handle)


def _decode_cause(exc: StarletteHTTPException) -> str:
    """Why FastAPI could not decode a body, from the error it chained (its own detail says only
    "There was an error parsing the body"): "" for any other error."""
    cause = exc.__cause__
    if exc.status_code != 400 or cause is None:
        return ""
    if isinstance(cause, RecursionError):
        return ": JSON nested too deep (Python's recursion limit)"
    return f": {str(cause).split(';', 1)[0][:200]}"

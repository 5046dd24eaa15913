"""Liveness, readiness and Prometheus endpoints; unauthenticated, as probes and scrapers expect.

``/healthz`` says the process serves HTTP (restart it if not). ``/readyz`` says it can do useful
work: Redis answers, at a version the service runs on (``redis_conn.MIN_REDIS_VERSION``), a Redis
Cluster serving commands (``cluster_ready.py``), and a predictor is loaded (a fallback counts: it is
a working predictor). A load balancer stops routing to a replica whose Redis is down and resumes by
itself when it returns.
All three answer ``HEAD`` as ``GET`` (status and headers; the server sends no body), since load
balancers, monitoring checks and ``curl -I`` probe with it; the ``HEAD`` routes stay out of the
OpenAPI document, where they would repeat the ``GET`` operations under the same operation id.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.datastructures import State

from service.api.cluster_ready import cluster_down
from service.auth.scopes import caller_of
from service.context import Context
from service.delivery.errors import REDIS_FAILED
from service.problems.table import UnauthorizedError
from service.redis_conn import refused

router = APIRouter(tags=["health"])
_log = logging.getLogger("service.health")


@router.get("/healthz")
@router.head("/healthz", include_in_schema=False)
async def healthz() -> dict[str, str]:
    """The process is up. ``async`` on purpose: it answers on the event loop, so a stalled Redis that
    holds every worker thread of the sync routes (each waiting out its timeouts) cannot starve the
    liveness probe into restarting every replica."""
    return {"status": "ok"}


_NOT_READY: dict[int | str, dict[str, Any]] = {
    503: {"description": "not ready: Redis or the predictor (the body says which)"}
}


@router.get("/readyz", responses=_NOT_READY)
@router.head("/readyz", include_in_schema=False)
def readyz(request: Request) -> JSONResponse:
    """Ready when Redis answers PING at a version the service runs on (a cluster's state ``ok``) and a
    predictor is loaded; 503 with the reason otherwise. The reason names Redis's host and port only to
    a caller with a known token (``_said``); the probe itself stays open."""
    trusted = _trusted(request)
    if request.app.state.context is None:  # start-up waits for a Redis Cluster, or refused an old Redis
        starting = _said(request.app.state, request.app.state.starting, trusted)
        return JSONResponse({"ready": False, "redis": starting, "model": None}, 503)
    ctx: Context = request.app.state.context  # not context_of: a Redis too old is said below, not raised
    ctx.models.reload_if_due()
    checks: dict[str, Any] = {"model": ctx.models.version}
    try:
        checks["redis"] = _redis_state(ctx)
    except REDIS_FAILED as error:  # a wrong password or ACL is not an outage: say which
        checks["redis"] = f"{'refused' if refused(error) else 'unreachable'}: {error}"
    ready = checks["redis"] == "ok" and ctx.models.loaded
    checks["redis"] = _said(request.app.state, checks["redis"], trusted)
    return JSONResponse({"ready": ready, **checks}, status_code=200 if ready else 503)


def _redis_state(ctx: Context) -> str:
    """``ok``, or why the service cannot use Redis although it answers PING: too old (``refused``), or
    a Redis Cluster refusing every command (``unreachable``, ``cluster_ready.py``)."""
    ctx.redis.ping()
    refusal = ctx.redis_version.check()  # asked once: Redis was down when the app started
    if refusal is not None:
        return f"refused: {refusal}"
    down = cluster_down(ctx.redis)
    return "ok" if down is None else f"unreachable: {down}"


def _trusted(request: Request) -> bool:
    """Whether the caller may read where Redis is: one with a known token (of either scope), or any
    caller of a service without tokens (loopback only, where every caller is trusted)."""
    try:
        caller_of(request.app.state.credentials, request.headers.get("authorization"))
    except UnauthorizedError:
        return False
    return True


def _said(state: State, detail: str, trusted: bool) -> str:
    """``detail`` as the caller may read it: whole when ``trusted``, else its first word
    (``unreachable``, ``refused``), since the error names Redis's host and port, which tell anyone
    who reaches the open probe where to aim next. A changed detail is logged (once, not every probe),
    so the operator reads the whole of it there."""
    if getattr(state, "readiness_logged", "ok") != detail:
        state.readiness_logged = detail
        if detail != "ok":
            _log.warning("not ready: redis %s", detail)
    return detail if trusted else detail.split(":", 1)[0]


@router.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}})
@router.head("/metrics", include_in_schema=False)
def metrics(request: Request) -> Response:
    """Prometheus text exposition. A ``HEAD`` renders it too, so that its headers (length
    included) are the ones a ``GET`` at that moment would carry."""
    return Response(request.app.state.metrics.render(), media_type=CONTENT_TYPE_LATEST)

"""Liveness, readiness and Prometheus endpoints; unauthenticated, as probes and scrapers expect.

``/healthz`` says the process serves HTTP (restart it if not). ``/readyz`` says it can do useful
work: Redis answers, at a version the service runs on (``redis_conn.MIN_REDIS_VERSION``), and a
predictor is loaded (a fallback counts: it is a working predictor). A load balancer stops routing
to a replica whose Redis is down and resumes by itself when it returns.
All three answer ``HEAD`` as ``GET`` (status and headers; the server sends no body), since load
balancers, monitoring checks and ``curl -I`` probe with it; the ``HEAD`` routes stay out of the
OpenAPI document, where they would repeat the ``GET`` operations under the same operation id.
"""

from __future__ import annotations

from typing import Any

import redis
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

from service.context import Context
from service.redis_conn import refused

router = APIRouter(tags=["health"])


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
    """Ready when Redis answers PING at a version the service runs on and a predictor is loaded; 503
    with the reason otherwise."""
    if request.app.state.context is None:  # start-up waits for a Redis Cluster, or refused an old Redis
        return JSONResponse({"ready": False, "redis": request.app.state.starting, "model": None}, 503)
    ctx: Context = request.app.state.context  # not context_of: a Redis too old is said below, not raised
    ctx.models.reload_if_due()
    checks: dict[str, Any] = {"model": ctx.models.version}
    try:
        ctx.redis.ping()
        refusal = ctx.redis_version.check()  # asked once: Redis was down when the app started
        checks["redis"] = "ok" if refusal is None else f"refused: {refusal}"
    except redis.RedisError as error:  # a wrong password or ACL is not an outage: say which
        checks["redis"] = f"{'refused' if refused(error) else 'unreachable'}: {error}"
    ready = checks["redis"] == "ok" and ctx.models.loaded
    return JSONResponse({"ready": ready, **checks}, status_code=200 if ready else 503)


@router.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}})
@router.head("/metrics", include_in_schema=False)
def metrics(request: Request) -> Response:
    """Prometheus text exposition. A ``HEAD`` renders it too, so that its headers (length
    included) are the ones a ``GET`` at that moment would carry."""
    return Response(request.app.state.metrics.render(), media_type=CONTENT_TYPE_LATEST)

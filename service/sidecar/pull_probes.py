"""The pull sidecar's probes: ``GET /health`` (liveness), ``GET /ready`` (readiness) and ``GET
/metrics`` (Prometheus), each with its ``HEAD``, served beside the worker's routes: ``add_probes``
puts them in ``pull_api``'s router, the one table of routes its 404s, 405s and docs test read.

Apart from those routes because they are no sign of the worker's life: a kubelet's probes and a
scraper call them whether the worker process lives or not, so they read ``PullState`` without its
``touch`` (``pull_api.pull_state``), and a dead worker's leases still lapse after ``idle_timeout_s``.
They answer while the sidecar still connects to Redis (``connecting``): ``/health`` ``connecting``
(an outage a restart cannot fix must not fail a liveness probe), ``/ready`` and ``/metrics`` 503.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST

from service.sidecar.metrics import pull_exposition
from service.sidecar.pull_state import PullState


async def health(request: Request) -> JSONResponse:
    """Liveness of the sidecar (not a sign of the worker's life: probes call it too); ``connecting``
    while it waits for Redis at start-up, 503 ``failed`` once a loop of it died (``supervision``)."""
    state: PullState = request.app.state.pull
    if not state.connected:
        return JSONResponse({"status": "connecting", "worker_id": state.worker_id, "held": 0, "waiting": 0})
    holdings = state.session.holdings  # held: handed to the worker, as /leases lists them
    body = {
        "status": "ok",
        "worker_id": state.worker_id,
        "held": len(holdings.handed()),
        "waiting": len(holdings.waiting()),
    }
    if state.loops.dead is not None:  # its heartbeats (or takeover) died: it is exiting, 70
        return JSONResponse({**body, "status": "failed", "error": str(state.loops.dead)}, status_code=503)
    return JSONResponse(body)


async def ready(request: Request) -> JSONResponse:
    """200 once ``/next`` can hand out work: Redis reached at start-up and a killed predecessor's
    leases handed back; 503 ``connecting`` or ``taking over`` before."""
    state: PullState = request.app.state.pull
    status = "connecting" if not state.connected else "taking over" if state.taking_over else "ok"
    status = "failed" if state.loops.dead is not None else status
    return JSONResponse({"status": status, "worker_id": state.worker_id}, status_code=_READY[status])


_READY = {"ok": 200, "connecting": 503, "taking over": 503, "failed": 503}


async def metrics(request: Request) -> Response:
    """The sidecar's counters and holdings for Prometheus, read at scrape time (``service.sidecar.
    metrics``; not a sign of the worker's life: a scraper calls it); 503 while it connects."""
    state: PullState = request.app.state.pull
    if not state.connected:  # nothing counted yet: a failed scrape, not a row of zeros
        return PlainTextResponse("connecting to Redis\n", status_code=503)
    return Response(pull_exposition(state.session, state.generation), media_type=CONTENT_TYPE_LATEST)


def add_probes(router: APIRouter) -> None:
    """Serve the probes on ``router`` (the pull API's), each path's ``GET`` with its ``HEAD``: what
    curl -I and balancers probe with, kept out of the schema."""
    for path, endpoint in (("/health", health), ("/ready", ready), ("/metrics", metrics)):
        for method, in_schema in (("HEAD", False), ("GET", True)):  # in the order decorators put them
            router.add_api_route(
                path, endpoint, methods=[method], response_model=None, include_in_schema=in_schema
            )

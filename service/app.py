"""The FastAPI application factory: settings in, app out; nothing happens at import time.

``create_app(settings)`` wires the routers, the problem table, the body-size limit, request
metrics, each request's arrival stamp (``service/arrival.py``: a caller's deadline counts from it) and,
without tokens, the ``Host`` allow-list (``service/hosts/allow_list.py``: DNS rebinding). Its
lifespan (``service.startup``) opens the Redis pool, loads the predictor (latest stored model,
history from the actuals stream) and starts the delivery reaper; on shutdown it waits for the
in-flight marks given up meanwhile to be taken back (``service/api/mark_hop.py``), stops the reaper
and closes the pool. Redis being down at startup does not stop the app: ``/readyz`` says so
and every Redis-bound request answers 503 until it returns (a Redis Cluster, whose client cannot be
built before a node answers, is waited for in the background while ``/healthz`` answers).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api import actuals, health, models, schedules
from service.api.mark_hop import settle as settle_take_backs
from service.arrival import ArrivalStamp
from service.auth.scopes import Credentials
from service.hosts.allow_list import HostAllowList, service_refusal
from service.limits import BodyLimitMiddleware
from service.logs import install_record_factory, request_schedule_id, schedule_context
from service.metrics import Metrics
from service.problems.table import install as install_problems
from service.settings import Settings
from service.startup import Startup

_log = logging.getLogger("service.app")
_access = logging.getLogger("service.access")  # one JSON line per request (uvicorn's access log is off)
_QUIET_ROUTES = frozenset({"/healthz", "/readyz", "/metrics"})
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})  # else "other"
# Every endpoint of ours, in one place so that create_app and the docs test see the same list.
API_ROUTERS = (schedules.router, actuals.router, models.router, health.router)


def create_app(settings: Settings, clock: Callable[[], float] = time.perf_counter) -> FastAPI:
    """Build the app for ``settings``; ``settings.redis_url`` must be set (``serve`` ensures it).
    ``clock``: what requests' arrivals, and the callers' deadlines counted from them, are read on
    (``time.perf_counter``; a test's moves as it feeds a body)."""
    metrics = Metrics()
    install_record_factory()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        startup = Startup(settings, metrics, app.state)
        startup.begin()
        try:
            yield
        finally:
            settle_take_backs(settings.redis_timeout_s)  # marks given up: before the pool closes
            startup.stop()
            _log.info("service stopped")

    app = FastAPI(
        title="rollout-scheduler",
        version="0.1.0",
        summary="Length-aware, device-aware scheduling of RL rollout batches.",
        lifespan=lifespan,
        # a path with a trailing slash is a 404 naming the one without (``problems._slash_hint``), not
        # Starlette's 307 to an absolute URL built from Host and the scheme seen: http behind TLS
        redirect_slashes=False,
    )
    app.state.settings = settings
    app.state.credentials = Credentials.of(settings)  # parsed once: requests only compare tokens
    app.state.metrics = metrics  # /metrics answers while the context is still being built
    install_problems(app)
    for router in API_ROUTERS:
        app.include_router(router)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    if not app.state.credentials.enabled:  # every caller trusted: answer to loopback names only
        allowed = settings.allowed_host_names()
        app.add_middleware(HostAllowList, allowed=allowed, refusal=service_refusal)
    routes = [*app.router.routes, *(route for router in API_ROUTERS for route in router.routes)]
    app.state.routes = routes  # a 405's Allow names the methods of every route on its path
    # outside the limits: 413s are counted too
    app.add_middleware(RequestMetricsMiddleware, metrics=metrics, routes=routes)
    app.add_middleware(ArrivalStamp, clock=clock)  # outermost of all: before any body byte is read
    return app


class RequestMetricsMiddleware:
    """Counts and times every HTTP request by route template (not raw path: ids would explode labels),
    and writes its access log line, tagged with the request's schedule id where it has one."""

    def __init__(self, app: ASGIApp, metrics: Metrics, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self.metrics = metrics
        self.routes = routes  # the app's, to name a request refused before routing (a 413)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request through, recording its status and duration."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def record_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, record_status)
        finally:
            route = self._route(scope)
            seconds = time.perf_counter() - started
            method = scope["method"] if scope["method"] in _METHODS else "other"  # callers pick verbs
            self.metrics.requests.labels(route, method, str(status)).inc()
            self.metrics.latency.labels(route).observe(seconds)
            if route not in _QUIET_ROUTES:  # probes and scrapes would drown the log
                with schedule_context(request_schedule_id(scope)):
                    _access.info(
                        "request",
                        extra={
                            "method": scope["method"],
                            "route": route,
                            "path": scope["path"],
                            "status": status,
                            "ms": round(seconds * 1000.0, 1),
                        },
                    )

    def _route(self, scope: Scope) -> str:
        """The route template that served the request, else the one its path matches, else
        ``unmatched`` (FastAPI names only its own API routes in the scope)."""
        route = scope.get("route")
        if route is not None:
            return str(route.path)
        return _template(self.routes, scope) or "unmatched"


def _template(routes: Sequence[BaseRoute], scope: Scope) -> str | None:
    """The path template of the first route with one that ``scope`` fully matches."""
    for candidate in routes:
        path = getattr(candidate, "path", None)
        if path is not None and candidate.matches(scope)[0] == Match.FULL:
            return str(path)
    return None

"""The FastAPI application factory: settings in, app out; nothing happens at import time.

``create_app(settings)`` wires the routers, the problem table, the body-size limit, request
metrics, each request's arrival stamp (``service/arrival.py``: a caller's deadline counts from it) and,
without tokens, the ``Host`` allow-list (``service/hosts/allow_list.py``: DNS rebinding). Its
lifespan (``service.startup``) opens the Redis pool, loads the predictor (latest stored model,
history from the actuals stream) and starts the delivery reaper; on shutdown it stops taking work,
waits one command timeout at most for what is under way on Redis (the in-flight marks given up
meanwhile, ``service/api/mark_hop.py`` and ``plan_thread.py``; the reaper's pass) and closes the
pool if nothing is left on it (``_stop``). Redis being down at startup does not stop the app:
``/readyz`` says so and every Redis-bound request answers 503 until it returns (a Redis Cluster,
whose client cannot be built before a node answers, is waited for in the background while
``/healthz`` answers).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api import actuals, exit_guard, health, models, schedules
from service.api.cut_answer import CutAnswer
from service.api.mark_hop import settle as settle_take_backs
from service.api.plan_thread import settle as settle_given_ups
from service.arrival import ArrivalStamp
from service.auth.scopes import Credentials
from service.hosts.allow_list import HostAllowList, service_refusal
from service.limits import BodyLimitMiddleware
from service.logs import install_record_factory, request_schedule_id, schedule_context
from service.metrics import Metrics
from service.pipeline import step_keeper
from service.pipeline.post_publish import settle as settle_after_publish
from service.problems.table import install as install_problems
from service.settings import Settings
from service.startup import Startup

_log = logging.getLogger("service.app")
_access = logging.getLogger("service.access")  # one JSON line per request (uvicorn's access log is off)
_QUIET_ROUTES = frozenset({"/healthz", "/readyz", "/metrics"})
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})  # else "other"
# Command timeouts (ROLLOUT_REDIS_TIMEOUT_S) from the app's stop to the process's exit on a stalled
# Redis: the stop's one window (``_stop``), then the exit's waits for the give-ups' take-backs that
# started after it (``mark_hop.settle``, ``plan_thread.GIVEN_UP``), one each. docs/operations.md,
# "Shutdown"; deploy/k8s/deployment.yaml's grace period covers it (tests/deploy/test_k8s_manifests.py).
STOP_TIMEOUTS = 3
# ... and past them, whatever still runs (a planning thread inside a Redis call: on a stalled Redis
# Cluster up to 7 timeouts), the process is ended (``service/api/exit_guard.py``), one timeout later
# than the stop's own waits may end, so that they are never cut.
EXIT_TIMEOUTS = STOP_TIMEOUTS + 1
# Every endpoint of ours, in one place so that create_app and the docs test see the same list.
API_ROUTERS = (schedules.router, actuals.router, models.router, health.router)


def create_app(
    settings: Settings, clock: Callable[[], float] = time.perf_counter, *, answer_cuts: bool = False
) -> FastAPI:
    """Build the app for ``settings``; ``settings.redis_url`` must be set (``serve`` ensures it).
    ``clock``: what requests' arrivals, and the callers' deadlines counted from them, are read on
    (``time.perf_counter``; a test's moves as it feeds a body). ``answer_cuts`` (``serve``): a request
    uvicorn's graceful wait cancels before its answer began is answered 503 (``CutAnswer``)."""
    metrics = Metrics()
    install_record_factory()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        startup = Startup(settings, metrics, app.state)
        startup.begin()
        try:
            yield
        finally:
            _stop(startup, settings.redis_timeout_s)
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
    if answer_cuts:  # inside the metrics: a cut request is counted with the 503 it is answered
        app.add_middleware(CutAnswer)
    # outside the limits: 413s are counted too
    app.add_middleware(RequestMetricsMiddleware, metrics=metrics, routes=routes)
    app.add_middleware(ArrivalStamp, clock=clock)  # outermost of all: before any body byte is read
    return app


def _stop(startup: Startup, timeout_s: float) -> None:
    """The app's stop, within one command timeout (``timeout_s``) on a stalled Redis: stop taking work
    (no reaper pass, no try at the cluster), wait for the give-ups' take-backs (``mark_hop``,
    ``plan_thread``), the bookkeeping an answer left running after its publish (``post_publish``),
    the reaper's pass, the retrain lock's release and a retrain under way (given up at the stop,
    ``service.learning.retrain``), all in the same window, and then close the
    Redis pool, unless a thread is still on it (docs/operations.md, "Shutdown"); the step keeper's
    thread, where it keeps nothing, ends then rather than at its next tick (``StepKeeper.settle``). A
    stop that waited in turn for each took ~7 s at a 2 s timeout (the reaper alone 5 s), and closed
    the pool under the reaper's pass still running (``Bad file descriptor``)."""
    until = time.perf_counter() + timeout_s
    exit_guard.arm(EXIT_TIMEOUTS * timeout_s)  # ``serve``'s process ends by then, whatever still runs
    startup.halt()
    cut = settle_take_backs(timeout_s)  # one timeout from now at most: ``until`` give or take
    cut += settle_given_ups(timeout_s, left_s=max(0.0, until - time.perf_counter()))
    cut += settle_after_publish(timeout_s, left_s=max(0.0, until - time.perf_counter()))
    startup.stop(max(0.0, until - time.perf_counter()), in_use=cut > 0)
    step_keeper.KEEPER.settle(max(0.0, until - time.perf_counter()))  # idle: ends now; else at last let_go


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

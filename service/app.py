"""The FastAPI application factory: settings in, app out; nothing happens at import time.

``create_app(settings)`` wires the routers, the problem table, the body-size limit and request
metrics. Its lifespan opens the Redis pool, loads the predictor (latest stored model, history from
the actuals stream) and starts the delivery reaper; on shutdown it stops the reaper and closes the
pool. Redis being down at startup does not stop the app: ``/readyz`` says so and every Redis-bound
request answers 503 until it returns (a Redis Cluster must answer once first: ``serve`` waits for it,
``service.redis_conn.wait_for_cluster``).
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager

import redis
from fastapi import FastAPI
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from predictors.store import ModelStore
from service.actuals import ActualsLog
from service.api import actuals, health, models, schedules
from service.context import Context
from service.delivery import Delivery
from service.delivery.errors import UnknownScheduleError
from service.delivery.reaper import Reaper
from service.limits import BodyLimitMiddleware, PlanSlots
from service.logs import install_record_factory, request_schedule_id, schedule_context
from service.metrics import Metrics
from service.models import ModelService
from service.problems import install as install_problems
from service.redis_conn import connect, describe, refused
from service.retrain import Retrainer
from service.settings import Settings
from service.speeds import SpeedLearner

_log = logging.getLogger("service.app")
_access = logging.getLogger("service.access")  # one JSON line per request (uvicorn's access log is off)
_QUIET_ROUTES = frozenset({"/healthz", "/readyz", "/metrics"})
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})  # else "other"
MAX_WATCHED_SCHEDULES = 32  # queue-depth metrics cover at most this many active schedules


def create_app(settings: Settings) -> FastAPI:
    """Build the app for ``settings``; ``settings.redis_url`` must be set (``serve`` ensures it)."""
    metrics = Metrics()
    install_record_factory()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        ctx = build_context(settings, metrics)
        app.state.context = ctx
        gc.collect()
        gc.freeze()  # long-lived startup objects leave the GC's scans: shorter pauses per request
        reaper = Reaper(ctx.delivery, on_reap=metrics.count_reaped).start()
        _log.info("service started", extra={"redis": describe(settings.redis_url or "")})
        try:
            yield
        finally:
            reaper.stop()
            ctx.retrainer.release()  # a retrain cut short by the shutdown must not hold the lock
            ctx.redis.close()
            _log.info("service stopped")

    app = FastAPI(
        title="rollout-scheduler",
        version="0.1.0",
        summary="Length-aware, device-aware scheduling of RL rollout batches.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    install_problems(app)
    routers = (schedules.router, actuals.router, models.router, health.router)
    for router in routers:
        app.include_router(router)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    # outermost: 413s are counted too
    routes = [*app.router.routes, *(route for router in routers for route in router.routes)]
    app.add_middleware(RequestMetricsMiddleware, metrics=metrics, routes=routes)
    return app


def build_context(settings: Settings, metrics: Metrics) -> Context:
    """Connect and load everything a request needs; tolerant of Redis being down right now."""
    client, prefix = connect(settings), settings.key_prefix
    delivery = Delivery(client, prefix)
    log = ActualsLog(client, settings.actuals_maxlen, prefix)
    model_service = ModelService(ModelStore(settings.model_dir), log, settings.model_keep)
    try:
        model_service.start()
    except redis.RedisError as error:
        model_service.loaded = True  # the fallbacks serve; history syncs on the first request
        if refused(error):  # waiting will not fix credentials: tell the operator
            _log.error(
                "Redis refused the service's user at startup (%s); check REDIS_URL's credentials", error
            )
        else:
            _log.warning("Redis unreachable at startup (%s); will retry on each request", error)
    metrics.watch_queues(lambda: _queue_depths(delivery))
    metrics.watch_model(lambda: _serving_version(model_service))
    return Context(
        settings=settings,
        redis=client,
        delivery=delivery,
        metrics=metrics,
        models=model_service,
        speeds=SpeedLearner(client, settings.speed_ewma_alpha, prefix),
        actuals=log,
        retrainer=Retrainer(model_service, client, metrics, settings.retrain_every_steps, prefix),
        plan_slots=PlanSlots(settings.max_concurrent_plans, settings.plan_queue_timeout_s),
    )


def _serving_version(predictor: ModelService) -> str:
    """The predictor version serving now, after picking up one another replica stored (as ``/readyz``
    and ``GET /models`` do): a replica that plans nothing must not report a version it dropped."""
    predictor.reload_if_due()
    return predictor.version


def _queue_depths(delivery: Delivery) -> Mapping[tuple[str, str], int]:
    """Counts by state of the newest active schedules (read when Prometheus scrapes)."""
    depths: dict[tuple[str, str], int] = {}
    for schedule_id in delivery.newest_schedules(MAX_WATCHED_SCHEDULES):
        try:
            totals = delivery.totals(schedule_id)
        except UnknownScheduleError:  # expired since it was indexed: the reaper will drop it
            continue
        for state, count in totals.items():
            depths[(schedule_id, state)] = count
    return depths


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

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
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import redis
from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from predictors.store import ModelStore
from service.actuals import ActualsLog
from service.api import actuals, health, models, schedules
from service.context import Context
from service.delivery import Delivery
from service.delivery.reaper import Reaper
from service.limits import BodyLimitMiddleware, PlanSlots
from service.logs import install_record_factory
from service.metrics import Metrics
from service.models import ModelService
from service.problems import install as install_problems
from service.redis_conn import connect, describe
from service.retrain import Retrainer
from service.settings import Settings
from service.speeds import SpeedLearner

_log = logging.getLogger("service.app")
_access = logging.getLogger("service.access")  # one JSON line per request (uvicorn's access log is off)
_QUIET_ROUTES = frozenset({"/healthz", "/readyz", "/metrics"})
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
        reaper = Reaper(ctx.delivery).start()
        _log.info("service started", extra={"redis": describe(settings.redis_url or "")})
        try:
            yield
        finally:
            reaper.stop()
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
    for router in (schedules.router, actuals.router, models.router, health.router):
        app.include_router(router)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(RequestMetricsMiddleware, metrics=metrics)  # outermost: 413s are counted too
    return app


def build_context(settings: Settings, metrics: Metrics) -> Context:
    """Connect and load everything a request needs; tolerant of Redis being down right now."""
    client, prefix = connect(settings), settings.key_prefix
    delivery = Delivery(client, prefix)
    log = ActualsLog(client, settings.actuals_maxlen, prefix)
    model_service = ModelService(ModelStore(settings.model_dir), log)
    try:
        model_service.start()
    except redis.RedisError as error:
        model_service.loaded = True  # the fallbacks serve; history syncs on the first request
        _log.warning("Redis unreachable at startup (%s); will retry on each request", error)
    metrics.watch_queues(lambda: _queue_depths(delivery))
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


def _queue_depths(delivery: Delivery) -> Mapping[tuple[str, str], int]:
    """Counts by state of the newest active schedules (read when Prometheus scrapes)."""
    depths: dict[tuple[str, str], int] = {}
    for schedule_id in delivery.active_schedules()[-MAX_WATCHED_SCHEDULES:]:
        progress = delivery.progress(schedule_id)
        for state in ("queued", "running", "done", "failed"):
            depths[(schedule_id, state)] = int(getattr(progress, state))
    return depths


class RequestMetricsMiddleware:
    """Counts and times every HTTP request by route template (not raw path: ids would explode labels)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

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
            route = getattr(scope.get("route"), "path", "unmatched")
            seconds = time.perf_counter() - started
            self.metrics.requests.labels(route, scope["method"], str(status)).inc()
            self.metrics.latency.labels(route).observe(seconds)
            if route not in _QUIET_ROUTES:  # probes and scrapes would drown the log
                _access.info(
                    "request",
                    extra={
                        "method": scope["method"],
                        "path": scope["path"],
                        "status": status,
                        "ms": round(seconds * 1000.0, 1),
                    },
                )

"""What a request handler can reach: the app's settings and the long-lived objects built at startup.

The app's lifespan builds one ``Context`` (``service.startup.build_context``: at start, or from a
thread while a Redis Cluster is waited for) and stores it on ``app.state``; routes fetch it with
``context_of(request)``, which answers 503 until it is there. Nothing here is a module-level
global, so two apps with different settings (tests, benchmarks) live side by side in one process.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio
from fastapi import Request

from service.delivery import Delivery
from service.delivery.errors import REDIS_FAILED
from service.learning.actuals import ActualsLog
from service.learning.models import ModelService
from service.learning.retrain import Retrainer
from service.limits import PlanSlots
from service.metrics import Metrics
from service.pipeline.publish_pace import PublishPace
from service.problems.table import UnavailableError
from service.redis_conn import RedisClient, RedisTooOldError, VersionCheck
from service.settings import Settings
from service.speeds.learner import SpeedLearner

LONG_POLLS = 16  # results requests that may wait at once; more queue for a thread of their own
PLAN_QUEUE_THREADS = 16  # POST /schedule requests in line for a plan slot at once, beside those planning


@dataclass(frozen=True)
class Context:
    """Long-lived collaborators of the request handlers."""

    settings: Settings  # injected by the factory's caller
    redis: RedisClient  # pooled; reconnects by itself after Redis restarts
    delivery: Delivery  # the Redis protocol the sidecars pull from (service.delivery)
    metrics: Metrics  # this app's Prometheus registry
    models: ModelService  # the length predictor: synced history, hot-swappable model
    speeds: SpeedLearner  # per-worker decode speed learned from actuals
    actuals: ActualsLog  # the durable stream of reported actuals
    retrainer: Retrainer  # on-demand and step-boundary retraining
    plan_slots: PlanSlots  # bounds how many requests plan at once
    redis_version: VersionCheck  # the server's version, checked once it answers (``/readyz``)
    # threads for POST /schedule (``plan_threads``): a burst of steps waiting for a plan slot (up to
    # ROLLOUT_PLAN_QUEUE_TIMEOUT_S each) held all 40 of the shared pool, and /readyz and /actuals
    # waited behind them; a slot for each plan, and PLAN_QUEUE_THREADS in line, more waiting threadless
    plan_threads: anyio.CapacityLimiter
    # threads for results long-polls: below the worker pool's 40, so polls that wait their whole
    # 30 s cannot take every thread from /readyz and the planning routes
    long_polls: anyio.CapacityLimiter = field(default_factory=lambda: anyio.CapacityLimiter(LONG_POLLS))
    # this replica's recent publish times: the reserve a caller's deadline keeps for a publish's size
    publish_pace: PublishPace = field(default_factory=PublishPace)


def context_of(request: Request) -> Context:
    """The app's context; ``UnavailableError`` (503) while start-up still waits for a Redis Cluster
    (``service.startup``: it is set before the first request otherwise), and ``RedisTooOldError``
    (503 naming the version) for a Redis too old, refused at start or found so later.

    Why every route and not only ``/readyz``: a Redis down at start is checked once it answers, and
    routes that ran meanwhile ran their scripts on a server that cannot run them (a Lua or ``XINFO``
    error, a 500), or half-published a step. The check is made once (``VersionCheck``); until
    Redis answers, the route goes on and meets the outage itself (503)."""
    ctx: Context | None = request.app.state.context
    if ctx is None:
        too_old: str | None = getattr(request.app.state, "too_old", None)
        if too_old is not None:
            raise RedisTooOldError(too_old)
        raise UnavailableError(f"starting: Redis {request.app.state.starting}")
    refusal = _version_refusal(ctx.redis_version)
    if refusal is not None:
        raise RedisTooOldError(refusal)
    return ctx


def _version_refusal(version: VersionCheck) -> str | None:
    """The refusal of a Redis too old; None when new enough or not reached yet."""
    if version.done:
        return version.refusal
    try:
        return version.check()
    except REDIS_FAILED:  # still down: the route meets the outage and answers 503 itself
        return None

"""What a request handler can reach: the app's settings and the long-lived objects built at startup.

The app factory builds one ``Context`` in its lifespan and stores it on ``app.state``; routes fetch it
with ``context_of(request)``. Nothing here is a module-level global, so two apps with different
settings (tests, benchmarks) live side by side in one process.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio
from fastapi import Request

from service.actuals import ActualsLog
from service.delivery import Delivery
from service.limits import PlanSlots
from service.metrics import Metrics
from service.models import ModelService
from service.problems import UnavailableError
from service.redis_conn import RedisClient, VersionCheck
from service.retrain import Retrainer
from service.settings import Settings
from service.speeds import SpeedLearner

LONG_POLLS = 16  # results requests that may wait at once; more queue for a thread of their own


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
    # threads for results long-polls: below the worker pool's 40, so polls that wait their whole
    # 30 s cannot take every thread from /readyz and the planning routes
    long_polls: anyio.CapacityLimiter = field(default_factory=lambda: anyio.CapacityLimiter(LONG_POLLS))


def context_of(request: Request) -> Context:
    """The app's context; ``UnavailableError`` (503) while start-up still waits for a Redis Cluster,
    or after it refused a Redis too old (``service.startup``: it is set before the first request
    otherwise)."""
    ctx: Context | None = request.app.state.context
    if ctx is None:
        raise UnavailableError(f"starting: Redis {request.app.state.starting}")
    return ctx

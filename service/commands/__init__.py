"""Command groups of the CLI; each module exposes ``register(app, bench_app)``.

Add a module to ``ALL`` to make its commands appear under ``rollout-scheduler``.
"""

from __future__ import annotations

from types import ModuleType

from service.commands import (
    bench_delivery,
    bench_redis_memory,
    bench_service,
    bench_solver,
    engine_sim,
    predictor,
    redis_acl,
    replay,
    serve,
    sidecar,
    trace,
)

ALL: list[ModuleType] = [
    bench_delivery,
    bench_solver,
    engine_sim,
    sidecar,
    serve,
    bench_service,
    replay,
    trace,
    bench_redis_memory,
    predictor,
    redis_acl,
]

"""The push-mode sidecar's probes on a port of its own: ``GET /health`` (liveness), ``GET /ready``
(readiness) and its counters for Prometheus on ``GET /metrics`` (``service.sidecar.metrics``).

Why. In push mode nothing calls the sidecar, so nothing notices when its loop stops turning (a
Redis call that never returns, a bug that blocks the event loop): its leases lapse and its items
are redelivered elsewhere, but the worker then sits idle for the rest of the run. An orchestrator
restarts a container whose liveness probe fails; this is that probe. It answers 200 while the main
loop has turned within ``stale_s`` (it turns at least every engine poll, ~1 s, also while the
engine is still loading) and 503 once it has not, with what the sidecar holds and whether its engine
and Redis answered last. It is served from before the sidecar reaches Redis, and answers 200
``connecting`` meanwhile: waiting out a Redis outage at start-up is not a stuck loop. ``/ready``
is 200 only once a claim has reached Redis. Pull mode needs none of this: its ``/health`` is on
the pull API.

Served by uvicorn from a thread of its own, not from the event loop it watches: a stuck loop still
gets a 503 with the details, instead of a probe that times out.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from service.sidecar.metrics import exposition
from service.sidecar.runner import Sidecar

STALE_S = 30.0  # a loop silent this long is stuck: several Redis timeouts (5 s each), not a slow turn


@dataclass
class Watched:
    """The sidecar the probes watch: None while it is still connecting to Redis at start-up."""

    runner: Sidecar | None = None


def create_health_app(watched: Sidecar | Watched, worker_id: str, stale_s: float = STALE_S) -> FastAPI:
    """The app: ``GET /health`` (liveness), ``GET /ready`` (readiness) and ``GET /metrics``.

    Served from before Redis answers: a Redis (Cluster) down at pod start is waited for, and a
    liveness probe that failed meanwhile restarted the pod again and again (CrashLoopBackOff) for an
    outage a restart cannot fix. Connecting is alive; it is only not ready."""
    target = watched if isinstance(watched, Watched) else Watched(watched)
    app = FastAPI(title="rollout-scheduler sidecar health")

    @app.get("/health")
    def health() -> JSONResponse:
        """200 ``ok`` (or ``connecting`` at start-up), 503 ``stalled`` once the loop stops turning."""
        runner = target.runner
        if runner is None:
            return JSONResponse({"status": "connecting", "worker_id": worker_id, "redis_up": False})
        body = _state(runner, worker_id, stale_s)
        return JSONResponse(body, status_code=200 if body["status"] == "ok" else 503)

    @app.get("/ready")
    def ready() -> JSONResponse:
        """200 once connected to Redis with the loop turning; 503 while connecting or Redis is down."""
        runner = target.runner
        if runner is None:
            return JSONResponse({"status": "connecting", "worker_id": worker_id, "redis_up": False}, 503)
        body = _state(runner, worker_id, stale_s)
        ok = body["status"] == "ok" and runner.redis_up
        return JSONResponse(body, status_code=200 if ok else 503)

    @app.get("/metrics", response_class=Response)
    def metrics() -> Response:
        """The sidecar's counters and state for Prometheus (``service.sidecar.metrics``)."""
        if target.runner is None:  # nothing counted yet: a failed scrape, not a row of zeros
            return Response("connecting to Redis\n", status_code=503, media_type="text/plain")
        return Response(exposition(target.runner, worker_id), media_type=CONTENT_TYPE_LATEST)

    return app


def _state(runner: Sidecar, worker_id: str, stale_s: float) -> dict[str, Any]:
    silent_s = time.monotonic() - runner.last_turn
    return {
        "status": "ok" if silent_s <= stale_s else "stalled",
        "worker_id": worker_id,
        "held": len(runner.session.holdings),
        "engine_up": runner.engine_up,
        "redis_up": runner.redis_up,
        "loop_silent_s": round(silent_s, 3),
    }


@dataclass
class HealthServer:
    """``create_health_app`` served on ``host:port`` from a daemon thread; ``stop`` joins it.

    Started before the sidecar reaches Redis (``runner`` None: connecting), then ``attach``-ed."""

    runner: Sidecar | None
    worker_id: str
    host: str
    port: int
    stale_s: float = STALE_S
    _watched: Watched = field(default_factory=Watched, init=False)
    _server: uvicorn.Server | None = field(default=None, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)

    def start(self) -> None:
        """Listen (uvicorn in a thread: it installs no signal handlers there, so SIGTERM stays ours).

        The socket is bound here, in the caller's thread, so a port in use is an ``OSError`` the
        sidecar exits on, not a log line in a thread while the liveness probe fails for good.
        """
        sock = socket.create_server((self.host, self.port))
        self._watched.runner = self.runner
        app = create_health_app(self._watched, self.worker_id, self.stale_s)
        config = uvicorn.Config(app, log_level="warning", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="sidecar-health", daemon=True
        )
        self._thread.start()

    def attach(self, runner: Sidecar) -> None:
        """The sidecar is connected: probe its loop from now on."""
        self.runner = self._watched.runner = runner

    def stop(self) -> None:
        """Stop listening; idempotent."""
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=5.0)
        self._server = self._thread = None

"""The push-mode sidecar's liveness endpoint: ``GET /health`` on a port of its own (and its
counters for Prometheus on ``GET /metrics``, ``service.sidecar.metrics``).

Why. In push mode nothing calls the sidecar, so nothing notices when its loop stops turning (a
Redis call that never returns, a bug that blocks the event loop): its leases lapse and its items
are redelivered elsewhere, but the worker then sits idle for the rest of the run. An orchestrator
restarts a container whose liveness probe fails; this is that probe. It answers 200 while the main
loop has turned within ``stale_s`` (it turns at least every engine poll, ~1 s, also while the
engine is still loading) and 503 once it has not, with what the sidecar holds and whether its engine
answered last. Pull mode needs none of this: its ``/health`` is on the pull API.

Served by uvicorn from a thread of its own, not from the event loop it watches: a stuck loop still
gets a 503 with the details, instead of a probe that times out.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field

import uvicorn
from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from service.sidecar.metrics import exposition
from service.sidecar.runner import Sidecar

STALE_S = 30.0  # a loop silent this long is stuck: several Redis timeouts (5 s each), not a slow turn


def create_health_app(runner: Sidecar, worker_id: str, stale_s: float = STALE_S) -> FastAPI:
    """The app: ``GET /health`` -> 200 ``{status: ok, ...}`` or 503 ``{status: stalled, ...}``."""
    app = FastAPI(title="rollout-scheduler sidecar health")

    @app.get("/health")
    def health() -> JSONResponse:
        silent_s = time.monotonic() - runner.last_turn
        alive = silent_s <= stale_s
        body = {
            "status": "ok" if alive else "stalled",
            "worker_id": worker_id,
            "held": len(runner.session.holdings),
            "engine_up": runner.engine_up,
            "loop_silent_s": round(silent_s, 3),
        }
        return JSONResponse(body, status_code=200 if alive else 503)

    @app.get("/metrics", response_class=Response)
    def metrics() -> Response:
        """The sidecar's counters and state for Prometheus (``service.sidecar.metrics``)."""
        return Response(exposition(runner, worker_id), media_type=CONTENT_TYPE_LATEST)

    return app


@dataclass
class HealthServer:
    """``create_health_app`` served on ``host:port`` from a daemon thread; ``stop`` joins it."""

    runner: Sidecar
    worker_id: str
    host: str
    port: int
    stale_s: float = STALE_S
    _server: uvicorn.Server | None = field(default=None, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)

    def start(self) -> None:
        """Listen (uvicorn in a thread: it installs no signal handlers there, so SIGTERM stays ours).

        The socket is bound here, in the caller's thread, so a port in use is an ``OSError`` the
        sidecar exits on, not a log line in a thread while the liveness probe fails for good.
        """
        sock = socket.create_server((self.host, self.port))
        app = create_health_app(self.runner, self.worker_id, self.stale_s)
        config = uvicorn.Config(app, log_level="warning", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="sidecar-health", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop listening; idempotent."""
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=5.0)
        self._server = self._thread = None

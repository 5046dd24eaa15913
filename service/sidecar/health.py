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

Served from a thread of its own, not from the event loop it watches: a stuck loop still gets a 503
with the details, instead of a probe that times out. Three GETs need no web framework: the standard
library's threading HTTP server (as ``prometheus_client.start_http_server``) spares every sidecar
start the ~0.5 s of CPU that importing FastAPI and uvicorn took.

Bound to loopback (the default), it answers only requests naming a loopback ``Host``, as the pull API
and a service without tokens do (``service/hosts/names.py``): a web page re-pointing its own name at
127.0.0.1 (DNS rebinding) would read the counters otherwise. Bound to another address (``0.0.0.0``
for the kubelet, whose probes send ``Host: <pod IP>:<port>``, and for Prometheus), every ``Host`` is
answered: whoever reaches that address reads the same three read-only pages directly, so the check
would keep out nobody and fail the probes (docs/operations.md, "Security").
"""

from __future__ import annotations

import ipaddress
import json
import logging
import socketserver
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import CONTENT_TYPE_LATEST

from service.hosts.names import LOOPBACK_NAMES, host_name, refused_host
from service.sidecar.metrics import exposition
from service.sidecar.runner import Sidecar

log = logging.getLogger("service.sidecar")

STALE_S = 30.0  # a loop silent this long is stuck: several Redis timeouts (5 s each), not a slow turn
# Seconds a connection may stay silent (no request byte, or a reply not taken) before it is closed:
# each holds a thread, and without a limit a client that connects and sends nothing held one for
# good (a slow-loris). A probe or scrape sends its request at once; 5 s is the kubelet's probe
# timeout five times over. It bounds each wait, not a request: a client trickling a byte every few
# seconds still holds its thread as long as it trickles.
CLIENT_TIMEOUT_S = 5.0
JSON = "application/json"


@dataclass(frozen=True, slots=True)
class Reply:
    """One probe's answer: status, content type and body."""

    status: int
    content_type: str
    body: bytes

    @classmethod
    def of(cls, body: dict[str, Any], status: int = 200) -> Reply:
        """A JSON answer, compact as FastAPI's ``JSONResponse`` wrote it."""
        return cls(status, JSON, json.dumps(body, separators=(",", ":")).encode())


@dataclass
class Probes:
    """What each path answers for the sidecar ``runner`` (None while it is still connecting).

    Connecting is alive, only not ready: a Redis (Cluster) down at pod start is waited for, and a
    liveness probe that failed meanwhile restarted the pod again and again (CrashLoopBackOff) for an
    outage a restart cannot fix."""

    runner: Sidecar | None
    worker_id: str
    stale_s: float = STALE_S

    def get(self, path: str) -> Reply:
        """The answer to ``GET path`` (a query string is ignored)."""
        route = {"/health": self.health, "/ready": self.ready, "/metrics": self.metrics}
        answer = route.get(urlsplit(path).path)
        return answer() if answer is not None else Reply.of({"detail": "Not Found"}, 404)

    def health(self) -> Reply:
        """200 ``ok`` (or ``connecting`` at start-up), 503 ``stalled`` once the loop stops turning, and
        503 ``failed`` (``error`` naming it) once a loop of the sidecar died (``supervision``)."""
        if self.runner is None:
            return Reply.of({"status": "connecting", "worker_id": self.worker_id, "redis_up": False})
        body = self._state(self.runner)
        return Reply.of(body, 200 if body["status"] == "ok" else 503)

    def ready(self) -> Reply:
        """200 once connected to Redis with the loop turning; 503 while connecting or Redis is down."""
        runner = self.runner
        if runner is None:
            return Reply.of({"status": "connecting", "worker_id": self.worker_id, "redis_up": False}, 503)
        body = self._state(runner)
        return Reply.of(body, 200 if body["status"] == "ok" and runner.redis_up else 503)

    def metrics(self) -> Reply:
        """The sidecar's counters and state for Prometheus (``service.sidecar.metrics``)."""
        if self.runner is None:  # nothing counted yet: a failed scrape, not a row of zeros
            return Reply(503, "text/plain; charset=utf-8", b"connecting to Redis\n")
        return Reply(200, CONTENT_TYPE_LATEST, exposition(self.runner, self.worker_id))

    def _state(self, runner: Sidecar) -> dict[str, Any]:
        silent_s = time.monotonic() - runner.last_turn
        holdings = runner.session.holdings
        dead = runner.loops.dead  # a loop died (heartbeats, ...): the sidecar hands back and exits 70
        status = "failed" if dead is not None else "ok" if silent_s <= self.stale_s else "stalled"
        return {
            "status": status,
            **({"error": str(dead)} if dead is not None else {}),
            "worker_id": self.worker_id,
            "held": holdings.in_flight(),  # on the engine; not those claimed ahead of a slot or KV
            "waiting": len(holdings.waiting()),
            "engine_up": runner.engine_up,
            "redis_up": runner.redis_up,
            "loop_silent_s": round(silent_s, 3),
        }


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def setup(self) -> None:
        """Bound every wait on the client (the socket timeout ``BaseHTTPRequestHandler.timeout`` would
        set, per server): a silent one is closed after ``client_timeout_s``, as
        ``handle_one_request`` ends the connection on a timeout."""
        super().setup()
        self.connection.settimeout(self.server.client_timeout_s)

    def do_GET(self) -> None:
        sent = self.headers.get("Host")
        if self.server.loopback_only and (sent is None or host_name(sent) not in LOOPBACK_NAMES):
            reply = Reply.of({"detail": refused_host(sent)}, 421)  # nothing read: a rebound page's
        else:
            reply = self.server.probes.get(self.path)
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        self.wfile.write(reply.body)

    def log_message(self, format: str, *args: Any) -> None:
        """No access log: a probe every few seconds would drown the sidecar's own lines."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a client that hangs up slowly does not hold the sidecar's exit

    def __init__(self, address: tuple[str, int], probes: Probes, client_timeout_s: float) -> None:
        self.probes = probes
        self.client_timeout_s = client_timeout_s
        self.loopback_only = is_loopback(address[0])  # then a Host naming another name is refused
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A prober that hung up before its reply (its timeout ran out while the sidecar was paused
        or slow) is the prober's business: nothing to say. ``socketserver``'s default printed a
        traceback to stderr for it, outside the sidecar's JSON log lines; any other error in a
        request is one line of that log, with its traceback."""
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError):  # broken pipe, reset or aborted by the client
            return
        log.error("health request from %s failed", client_address, exc_info=error)

    def server_bind(self) -> None:
        """Bind without ``HTTPServer``'s reverse DNS lookup of the host (``getfqdn``: for a name
        nothing here reads, and a resolver that does not answer would stall the start); a port in
        use names the address, as ``socket.create_server`` does."""
        try:
            socketserver.TCPServer.server_bind(self)
        except OSError as error:
            where = f"{error.strerror} (while attempting to bind on address {self.server_address!r})"
            raise OSError(error.errno, where) from None


def is_loopback(host: str) -> bool:
    """Whether ``host`` (the address bound) reaches this machine only: ``localhost``, 127.0.0.0/8, ::1."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a name: resolved at bind, perhaps to anything
        return False


@dataclass
class HealthServer:
    """``Probes`` served on ``host:port`` from a daemon thread; ``stop`` joins it.

    Started before the sidecar reaches Redis (``runner`` None: connecting), then ``attach``-ed.
    Port 0 takes a free port, which ``port`` then holds. A connection silent for ``client_timeout_s``
    is closed (``CLIENT_TIMEOUT_S``)."""

    runner: Sidecar | None
    worker_id: str
    host: str
    port: int
    stale_s: float = STALE_S
    client_timeout_s: float = CLIENT_TIMEOUT_S
    _server: _Server | None = field(default=None, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)

    def start(self) -> None:
        """Listen, and serve from a thread (which installs no signal handlers: SIGTERM stays ours).

        The socket is bound here, in the caller's thread, so a port in use is an ``OSError`` the
        sidecar exits on, not a log line in a thread while the liveness probe fails for good.
        """
        probes = Probes(self.runner, self.worker_id, self.stale_s)
        self._server = _Server((self.host, self.port), probes, self.client_timeout_s)
        self.port = self._server.server_address[1]
        # poll_interval: how soon ``stop`` is noticed (the default 0.5 s would slow every exit)
        serve = {"poll_interval": 0.05}
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs=serve, name="sidecar-health", daemon=True
        )
        self._thread.start()

    def attach(self, runner: Sidecar) -> None:
        """The sidecar is connected: probe its loop from now on."""
        self.runner = runner
        if self._server is not None:
            self._server.probes.runner = runner

    def stop(self) -> None:
        """Stop listening; idempotent."""
        if self._server is not None and self._thread is not None:
            self._server.shutdown()  # returns once serve_forever has
            self._server.server_close()
            self._thread.join(timeout=5.0)
        self._server = self._thread = None

"""Assemble and run a sidecar from its options: connect Redis and the engine, serve until SIGTERM.

Kept apart from the CLI so tests and embedders start the same thing the command does.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import signal
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import redis

from service.delivery.errors import REDIS_FAILED
from service.delivery.hangable import hangable, hangable_cluster
from service.delivery.keys import DEFAULT_PREFIX
from service.delivery.protocol import Delivery
from service.delivery.retries import short_retry
from service.delivery.stored import REPLY_DECODING
from service.redis_conn import (
    RedisRefusedError,
    RedisTooOldError,
    VersionCheck,
    built_when_reachable,
    describe,
    masked_repr,
    refused,
    require_version,
)
from service.sidecar import early_stop, stop_relay
from service.sidecar.hang_up import hang_up
from service.sidecar.holdings import Holdings
from service.sidecar.hurry import Hurry
from service.sidecar.session import RELEASE_GRACE_S, SessionSettings, SessionStats, WorkerSession
from service.sidecar.supervision import LoopDiedError

if TYPE_CHECKING:
    import uvicorn

    from service.sidecar.health import HealthServer

log = logging.getLogger("service.sidecar")


class CannotListenError(OSError):
    """A port the sidecar serves on (the health port, the pull API's) could not be bound: taken since
    its flags were checked, or not ours to take. The command's exit 2, "cannot listen"; an ``OSError``
    from anywhere else is no port's fault, and was told as one (helper review47c)."""


@contextlib.contextmanager
def _binding() -> Iterator[None]:
    """A bind: its ``OSError`` decides the command's exit (``early_stop.deciding``: nothing here
    retries one), raised as ``CannotListenError``."""
    with early_stop.deciding(OSError):
        try:
            yield
        except OSError as error:
            raise CannotListenError(*error.args) from error


@dataclass(frozen=True, slots=True)
class SidecarOptions:
    """Everything ``rollout-scheduler sidecar`` can be told."""

    worker_id: str  # this worker's id in the plans
    redis_url: str  # redis:// or rediss:// (ACL user:password in the URL)
    redis_password: str | None = field(default=None, repr=False)  # when not in the URL (not shown by ps)
    redis_username: str | None = None  # ACL user when not in the URL (as the service's setting)
    redis_tls_ca_file: str | None = None  # CA bundle that signed a rediss:// server's certificate
    engine_url: str | None = None  # the engine's base URL (push mode)
    pull_api_port: int | None = None  # serve the local pull API on this port instead (pull mode)
    pull_api_host: str = "127.0.0.1"  # the pull API is for a local process: loopback by default
    prefix: str = DEFAULT_PREFIX  # Redis key prefix of the deployment
    cluster: bool = False  # the URL names a Redis Cluster node
    max_num_seqs: int = 256  # the engine's concurrent-sequence limit
    kv_capacity_tokens: int | None = None  # the engine's KV cache; enables KV admission when asked
    engine_model: str | None = None  # model id to request; default: the engine's first
    engine_api_key: str | None = field(default=None, repr=False)  # bearer token for the engine
    synthetic_prompts: bool = False  # placeholder prompts for items without text (engine-sim demos)
    steal: bool = True  # steal when the own queue is empty
    reap_when_idle: bool = True  # reap lapsed leases of a schedule found empty
    heartbeat_interval_s: float | None = None  # None: a third of the lease TTL
    idle_poll_s: float = 0.2  # how often an idle sidecar looks for work
    drain_timeout_s: float = 20.0  # on SIGTERM, how long running items may finish
    engine_stall_s: float = 30.0  # push mode: an engine silent this long while items run is down
    engine_hang_s: float = 3600.0  # push mode: one item unanswered this long (at least) is handed back
    pull_idle_timeout_s: float = 60.0  # pull mode: stop heartbeating a worker silent this long
    pull_hold_timeout_s: float = 3600.0  # pull mode: an item unreported this long (at least) is abandoned
    health_port: int | None = None  # push mode: serve GET /health (liveness) on this port
    health_host: str = "127.0.0.1"  # where; a kubelet's probe needs the pod's address (0.0.0.0)

    def __repr__(self) -> str:
        """Without the Redis password, the engine's key, or a password in either URL."""
        return masked_repr(self, "redis_url", "engine_url")


def connect(options: SidecarOptions, wait: bool = False) -> Delivery:
    """The delivery client (``connected``'s, without the version check left to the runner)."""
    return connected(options, wait)[0]


def connected(options: SidecarOptions, wait: bool = False) -> tuple[Delivery, VersionCheck | None]:
    """The delivery client, and the version check left to the push runner (None: asked already);
    connection and command timeouts keep a dead Redis from hanging us.

    Credentials and the CA file come as for the service (``ROLLOUT_REDIS_USERNAME``,
    ``ROLLOUT_REDIS_PASSWORD``, ``ROLLOUT_REDIS_TLS_CA_FILE``). A server that refuses them raises
    ``RedisRefusedError`` now: waiting will not fix them, and a sidecar that only logged it would
    sit idle while its liveness probe said ok. An unreachable server is waited for by the push loop;
    with ``wait`` (pull mode) here, a log line every 2 s: pull mode's ``/ready`` means Redis answered
    at start-up, and it had answered 200 (and every ``/next`` 503) while a plain Redis was still down.

    A server that answers is asked its version as the service asks it (``redis_conn.require_version``):
    one older than the service runs on raises ``RedisTooOldError`` now. The sidecar used to start
    anyway: where its scripts' commands were missing each claim failed, which the runner took for an
    outage ("redis unavailable", never claiming), and elsewhere it served a deployment whose service
    refused every request. A plain Redis down at start-up in push mode cannot be asked yet: the
    check is returned, and the runner makes it once the server answers, before its first claim.
    """
    client_args = _client_args(options)
    if options.cluster:  # a cluster client reads the slot map when built: wait for one that answers
        cluster = built_when_reachable(  # a stop is heard in its sleeps (``early_stop.pause``)
            lambda: hangable_cluster(options.redis_url, retry=short_retry(), **client_args),
            options.redis_url,
            sleep=early_stop.pause,
        )
        require_version(cluster, options.redis_url)
        return Delivery(cluster, options.prefix), None
    client = hangable(options.redis_url, health_check_interval=15, **client_args)
    if wait:
        answering = built_when_reachable(lambda: _answering(client), options.redis_url)
        require_version(answering, options.redis_url)
        return Delivery(answering, options.prefix), None
    version = _version_left(client, options.redis_url)  # None: asked already
    return Delivery(client, options.prefix), version


def _client_args(options: SidecarOptions) -> dict[str, Any]:
    """The Redis client's keyword arguments: timeouts, decoded replies, and the credentials and CA
    file the options give (a CA file only for a rediss:// URL)."""
    client_args: dict[str, Any] = {
        "socket_connect_timeout": 2.0,
        "socket_timeout": 5.0,
        **REPLY_DECODING,  # a stored byte that is not UTF-8 fails no reply (service/delivery/stored.py)
    }
    if options.redis_password is not None:
        client_args["password"] = options.redis_password
    if options.redis_username:
        client_args["username"] = options.redis_username
    if options.redis_tls_ca_file and options.redis_url.startswith("rediss://"):
        client_args["ssl_ca_certs"] = options.redis_tls_ca_file
    return client_args


def _version_left(client: redis.Redis, url: str) -> VersionCheck | None:
    """Push mode's start: None once the server answered and is new enough; the version check left
    to the runner while it is down; ``RedisRefusedError`` when it refuses our credentials (and
    ``RedisTooOldError`` when too old, as ``require_version`` raises)."""
    try:
        client.ping()
        require_version(client, url)
    except REDIS_FAILED as error:
        if refused(error):
            where = describe(url)
            raise RedisRefusedError(f"Redis at {where} refused our credentials: {error}") from None
        return VersionCheck(client, url)  # down now
    return None


def _answering(client: redis.Redis) -> redis.Redis:
    """``client`` once its server answers a PING (raises the client's error until then)."""
    client.ping()
    return client


def session_for(
    options: SidecarOptions, delivery: Delivery, stats: SessionStats | None = None
) -> WorkerSession:
    """The worker session both modes share, counting into ``stats`` (the command's: what a run that
    raised had counted is on its counters line too)."""
    settings = SessionSettings(
        worker_id=options.worker_id,
        steal=options.steal,
        reap_when_idle=options.reap_when_idle,
        heartbeat_interval_s=options.heartbeat_interval_s,
    )
    holdings = Holdings(options.max_num_seqs, options.kv_capacity_tokens)
    return WorkerSession(delivery, holdings, settings, stats if stats is not None else SessionStats())


def run_push(options: SidecarOptions, stats: SessionStats | None = None) -> SessionStats:
    """Feed the engine at ``engine_url`` until SIGTERM/SIGINT, then drain; return the counters
    (``stats``, counted into as the run goes, when given).

    The health server starts first: waiting for a Redis (Cluster) that is down at start-up must
    answer the liveness probe (``connecting``), or the orchestrator restarts the pod in a loop.
    Each mode imports its own modules when it runs: pull mode loads no engine client (httpx)."""
    from service.sidecar.health import HealthServer

    assert options.engine_url is not None
    health = None
    if options.health_port is not None:
        health = HealthServer(None, options.worker_id, options.health_host, options.health_port)
        with _binding():  # taken: exit 2
            health.start()
        _listening("health probes", options.health_host, health.port)
    try:
        # before the loop: a wait for the cluster must not hold off SIGTERM
        delivery, version = connected(options)
        return asyncio.run(_push(options, options.engine_url, (delivery, version), health, stats))
    finally:
        if health is not None:
            health.stop()


async def _push(
    options: SidecarOptions,
    engine_url: str,
    redis_side: tuple[Delivery, VersionCheck | None],
    health: HealthServer | None,
    stats: SessionStats | None = None,
) -> SessionStats:
    from service.sidecar.engine_client import EngineClient, EngineOptions
    from service.sidecar.runner import RunnerSettings, Sidecar

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    probe_s = min(5.0, options.engine_stall_s / 4)  # the health probe's period and timeout
    engine = EngineClient.open(
        EngineOptions(
            base_url=engine_url,
            model=options.engine_model,
            api_key=options.engine_api_key,
            synthetic_prompts=options.synthetic_prompts,
            probe_timeout_s=probe_s,
        )
    )
    delivery, version = redis_side
    session = session_for(options, delivery, stats)
    runner = Sidecar(
        session,
        engine,
        RunnerSettings(
            idle_poll_s=options.idle_poll_s,
            drain_timeout_s=options.drain_timeout_s,
            engine_probe_s=probe_s,
            engine_stall_s=options.engine_stall_s,
            hang_timeout_s=options.engine_hang_s,
        ),
        version=version,
    )
    if health is not None:
        health.attach(runner)
    console = early_stop.armed()  # the console script's process: deaf once the run ended
    try:
        with stop_relay.relayed(loop, functools.partial(_on_signal, stop, runner.hurry), deaf=console):
            if console and early_stop.held():  # a stop that met an error handled on the way here
                stop.set()
            return await runner.run(stop)  # not the loop's handlers: its close resets them
    finally:
        await engine.aclose()
        hang_up(delivery)  # calls the drain abandoned end now, not at their socket timeout


def _on_signal(stop: asyncio.Event, hurry: Hurry) -> None:
    """The first SIGTERM or SIGINT drains (``Sidecar.run``); a second one cuts the drain short: the
    running items are stopped and released now, and what Redis has not taken within the release grace
    of it is left to lapse (``hurry.py``). It used to be ignored, without a word, and a second Ctrl-C
    waited out the whole ``--drain-timeout`` (20 s by default). A third and later one change nothing
    and say nothing: the exit is due within the grace already (docs/sidecar.md)."""
    if stop.is_set() and not hurry.is_set():
        log.warning("second signal: stopping the running items now and releasing them")
        hurry.set()
    stop.set()


def run_pull(options: SidecarOptions, stats: SessionStats | None = None) -> SessionStats:
    """Serve the local pull API until SIGTERM/SIGINT (uvicorn's handlers); return the counters
    (``stats``, counted into as the run goes, when given).

    The socket is bound here, before anything starts, so a port in use is an ``OSError`` the
    command reports in one line; and the app sees uvicorn's ``should_exit``, so a long-poll in
    flight stops claiming the moment SIGTERM arrives. Redis is reached while the API serves (a
    cluster down at start-up is waited for with ``/health`` answering); credentials it refuses, or a
    version too old, stop the server and are raised here (``RedisRefusedError``, ``RedisTooOldError``),
    and so does a loop of it that died (``LoopDiedError``, after the drain: ``supervision``)."""
    from service.sidecar.connecting import Connecting
    from service.sidecar.pull_api import create_pull_app

    assert options.pull_api_port is not None
    with _binding():  # taken: exit 2
        listener = socket.create_server((options.pull_api_host, options.pull_api_port))
    _listening("pull API", options.pull_api_host, listener.getsockname()[1])
    server: uvicorn.Server | None = None
    counted = stats if stats is not None else SessionStats()
    made: list[WorkerSession] = []
    refusals: list[RedisRefusedError | RedisTooOldError] = []
    deaths: list[LoopDiedError] = []

    def failed(death: LoopDiedError) -> None:  # a loop died: drain as at SIGTERM, then exit 70
        deaths.append(death)
        if server is not None:
            server.should_exit = True

    def connected() -> WorkerSession:
        try:
            made.append(session_for(options, connect(options, wait=True), counted))
        except (RedisRefusedError, RedisTooOldError) as error:  # waiting will not help: stop, say why
            refusals.append(error)
            if server is not None:
                server.should_exit = True
            raise
        return made[0]

    hurry = Hurry(grace_s=RELEASE_GRACE_S)  # set by a second signal (``pull_server``)
    app = create_pull_app(
        Connecting(options.worker_id, connected),
        options.pull_idle_timeout_s,
        stopping=lambda: server is not None and server.should_exit,
        release_within_s=RELEASE_GRACE_S,
        hold_timeout_s=options.pull_hold_timeout_s,
        on_failure=failed,
        drain_s=options.drain_timeout_s,
        hurry=hurry,
    )
    found = {sig: signal.getsignal(sig) for sig in early_stop.STOP_SIGNALS}
    console = early_stop.armed()  # the console script's process: deaf once the run ended
    server = _pull_server(app, options.drain_timeout_s, hurry)
    if console and early_stop.held():  # a stop that met an error handled on the way here
        _stop_server(server)
    try:
        server.run(sockets=[listener])
    finally:  # not ``_pull_server``'s, which uvicorn put back: a caller's Ctrl-C did nothing after
        for sig, handler in found.items():
            signal.signal(sig, signal.SIG_IGN if console else stop_relay.settable(handler))
    if refusals:
        raise refusals[0]
    if deaths:
        raise deaths[0]
    return counted


def _listening(what: str, host: str, port: int) -> None:
    """Log where ``what`` listens, once bound: the port asked for, or with port 0 the kernel's pick,
    which only this line tells a user (or a test that starts a sidecar and must not race for a port)."""
    log.info("%s listening on http://%s:%d", what, f"[{host}]" if ":" in host else host, port)


def _pull_server(app: Any, drain_timeout_s: float, hurry: Hurry) -> uvicorn.Server:
    """The uvicorn server of the pull API, SIGTERM/SIGINT left to it.

    log_config=None keeps the JSON handler ``sidecar`` configured (uvicorn's would print plain text).
    On SIGTERM the requests in flight get the drain timeout, then are given up (``pull_drain``: one
    warning, each answered 503): uvicorn would wait for them without end, and a /done retrying
    through a Redis outage holds on for a minute, far past the pod's grace period. uvicorn's own
    bound, a second later, is a backstop only: what it cuts it logs as two errors. What is held is
    then released within RELEASE_GRACE_S. A second signal sets ``hurry`` (``pull_server``)."""
    import uvicorn

    from service.sidecar.pull_server import PullServer

    config = uvicorn.Config(
        app,
        log_config=None,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=math.ceil(drain_timeout_s) + 1,  # past the app's own bound
    )
    server = PullServer(config, hurry)
    # uvicorn shuts down gracefully on SIGTERM/SIGINT, then re-raises the signal to the handler it
    # found installed; this one lets us return and report instead of dying by the signal. It is also
    # the handler until uvicorn's own are in (its event loop made): a stop signal then has the server
    # start and stop at once, where a no-op one had it lost, and the sidecar served on until SIGKILL.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: _stop_server(server))
    return server


def _stop_server(server: uvicorn.Server) -> None:
    """Ask ``server`` to stop as its own first signal does; once it has stopped, this changes nothing."""
    server.should_exit = True

"""``rollout-scheduler serve``: the scheduling service under uvicorn.

Flags override environment variables (README, "Settings"). Without ``--redis-url``/``REDIS_URL`` it
starts a private valkey-server on a free loopback port and stops it on exit, so ``make run`` works on
a fresh machine. It refuses to listen on a non-loopback address with no token configured: an open
scheduler lets anyone reorder (or starve) a training job's rollouts.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from service.engines import SERVICE_ENGINE  # no imports of its own: the CLI starts without pydantic

if TYPE_CHECKING:  # the settings module loads pydantic: kept off the CLI's start-up path
    from service.settings import Settings

HELP = (
    "Serve the scheduling API (POST /schedule, /actuals, /models/retrain, GET and DELETE "
    "/schedule/{id}, GET /schedule/{id}/results, /models, /healthz, /readyz, /metrics). Without "
    "--redis-url or REDIS_URL "
    "an embedded valkey-server is started."
)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Attach ``serve`` to the root app."""
    del bench_app
    app.command("serve", help=HELP)(serve)


def serve(
    host: Annotated[
        str | None, typer.Option(help="Bind address (env ROLLOUT_HOST, default 127.0.0.1).")
    ] = None,
    port: Annotated[int | None, typer.Option(help="Port (env ROLLOUT_PORT, default 8000).")] = None,
    redis_url: Annotated[
        str | None,
        typer.Option(
            help="redis://, rediss:// or unix:// URL (env REDIS_URL, else ROLLOUT_REDIS_URL; default an"
            " embedded server)."
        ),
    ] = None,
    redis_cluster: Annotated[
        bool | None,
        typer.Option("--redis-cluster/--no-redis-cluster", help="The URL names a Redis Cluster node."),
    ] = None,
    model_dir: Annotated[str | None, typer.Option(help="Model store (env ROLLOUT_MODEL_DIR).")] = None,
    default_policy: Annotated[
        str | None, typer.Option(help="Policy when a request names none (env ROLLOUT_DEFAULT_POLICY).")
    ] = None,
    default_engine: Annotated[
        str | None,
        typer.Option(
            help="Engine the workers run, when a request names none: vllm-v1 or vllm-v0 "
            f"(env ROLLOUT_DEFAULT_ENGINE, default {SERVICE_ENGINE})."
        ),
    ] = None,
    max_body_bytes: Annotated[
        int | None, typer.Option(help="Request body limit (env ROLLOUT_MAX_BODY_BYTES).")
    ] = None,
    max_trajectories: Annotated[
        int | None, typer.Option(help="Trajectories per batch limit (env ROLLOUT_MAX_TRAJECTORIES).")
    ] = None,
    retrain_every_steps: Annotated[
        int | None, typer.Option(help="Retrain every N steps, 0 = off (env ROLLOUT_RETRAIN_EVERY_STEPS).")
    ] = None,
    log_level: Annotated[str | None, typer.Option(help="Log level (env ROLLOUT_LOG_LEVEL).")] = None,
) -> None:
    """Build the settings, check they are safe to serve with, then run until SIGINT/SIGTERM; the exit
    is marked begun however it ends (``run``), a crash in the checks included."""
    flags = {
        "host": host,
        "port": port,
        "redis_url": redis_url,
        "redis_cluster": redis_cluster,
        "model_dir": model_dir,
        "default_policy": default_policy,
        "default_engine": default_engine,
        "max_body_bytes": max_body_bytes,
        "max_trajectories": max_trajectories,
        "retrain_every_steps": retrain_every_steps,
        "log_level": log_level,
    }
    given = {k: v for k, v in flags.items() if v is not None}
    from service.cli import exit_begun

    try:
        settings = load_settings(given)
        refusal = (
            cluster_without_url(settings, given)
            or unsafe_binding(settings, given)
            or port_taken(settings, given)
        )
        if refusal:
            _fail(refusal)
        run(settings)
    finally:  # refused (2), stopped, failed (3) or crashed (1): a stop signal now must not start it again
        exit_begun()


def load_settings(overrides: dict[str, Any]) -> Settings:
    """Settings from the environment with ``overrides`` (serve's flags) on top; a bad value exits with
    one line naming it as the user set it: ``--port=99999`` from the flag, ``ROLLOUT_PORT='99999'``
    from the environment."""
    from pydantic import ValidationError

    from service.settings import Settings, invalid_setting

    try:
        return Settings(**overrides)
    except ValidationError as error:
        _fail(invalid_setting(error, flags={name: _flag(name) for name in overrides}))


def _flag(name: str) -> str:
    """The option of serve's parameter ``name``, as typer spells it (``--default-policy``)."""
    return "--" + name.replace("_", "-")


def port_taken(settings: Settings, given: Mapping[str, object] | None = None) -> str | None:
    """Why the address cannot be served, or None. Checked before the embedded Redis starts: uvicorn
    would find out only after the app's startup, log it as complete, and exit 3. The setting to blame
    (the port when it is in use, else the host) is named as set (``--port=8000`` from ``given``, serve's
    flags, or ``ROLLOUT_PORT='8000'``), or by what would set it where it holds its default."""
    import errno

    from service.ports import bind_error, why_unservable

    error = bind_error(settings.host, settings.port)
    if error is None:
        return None
    blamed = "port" if error.errno == errno.EADDRINUSE else "host"
    named = _as_set(blamed, given or {}) or f"choose another with {_flag(blamed)} or {_variable(blamed)}"
    return f"{why_unservable(settings.host, settings.port, error)} ({named})"


def cluster_without_url(settings: Settings, flagged: Collection[str] = ()) -> str | None:
    """Why a cluster was asked for with nothing to find it by, or None. Without a URL serve starts
    its embedded server, a single node, and cluster discovery would wait on it for ever. The ask is
    named as made: the flag when ``flagged`` (settings given as flags) has it, else the variable."""
    from service.settings import variable_name

    if settings.redis_cluster and not settings.redis_url:
        asked = _flag("redis_cluster") if "redis_cluster" in flagged else variable_name("redis_cluster")
        return f"{asked} needs --redis-url (or REDIS_URL): the embedded server is a single node"
    return None


def unsafe_binding(settings: Settings, given: Mapping[str, object] | None = None) -> str | None:
    """Why these settings must not be served, or None when they are fine. The host is named as set
    (``--host='0.0.0.0'`` from ``given``, serve's flags, or ``ROLLOUT_HOST='0.0.0.0'``): the user
    finds the setting to change, as a refused value's line names it (``load_settings``)."""
    if settings.binds_loopback_only:
        return None
    host = _as_set("host", given or {}) or settings.host
    if settings.auth_enabled and not settings.redis_url:
        return (
            f"refusing to listen on {host} with the embedded Redis (no password, this machine only, "
            "lost on exit): set --redis-url (or REDIS_URL), or bind 127.0.0.1"
        )
    if settings.auth_enabled:
        return None
    return (
        f"refusing to listen on {host} without a token: set ROLLOUT_TRAINER_TOKENS "
        "(and ROLLOUT_WORKER_TOKENS), or bind 127.0.0.1"
    )


def _as_set(field: str, given: Mapping[str, object]) -> str | None:
    """Setting ``field`` with its value as the user set it: ``--port=8000`` when ``given`` (serve's
    flags) has it, ``ROLLOUT_PORT='8000'`` (as spelt and given there) when the environment does, else
    None (it holds its default)."""
    if field in given:
        return f"{_flag(field)}={given[field]!r}"
    variable = _variable(field)
    value = os.environ.get(variable)
    return None if value is None else f"{variable}={value!r}"


def _variable(field: str) -> str:
    """The environment variable of ``field`` as set (``rollout_port`` too), else its usual name."""
    from service.settings import variable_name

    return variable_name(field)


def run(settings: Settings) -> None:
    """Serve ``settings`` with uvicorn, inside an embedded Redis when no URL is configured. Its exit is
    marked begun (``service.cli.exit_begun``) however it ends, from its first step: a crash before the
    exit guard's ``enable`` (the logging's configure, the open-file limit's raise) went out unmarked,
    and a stop signal meeting it on its way out raised ``SystemExit(0)`` over it, exit 0 and no
    traceback for a replica that never served (exit55's leftover, finish56)."""
    from service.cli import exit_begun

    try:
        _serve(settings)
    finally:  # stopped, failed (3) or crashed (1): a stop signal now must not start it again
        exit_begun()


def _serve(settings: Settings) -> None:
    """``run``'s steps: the settings said, the signals handled, the guard enabled, then uvicorn."""
    import uvicorn

    from service import logs
    from service.api import exit_guard
    from service.app import create_app
    from service.cli import exit_cleanly
    from service.embedded import EmbeddedServerError, end_all_now
    from service.redis_conn import redis_for
    from service.serving import STARTUP_FAILURE, CountingServer
    from service.settings import unknown_variables

    logs.configure(settings.log_level)
    for line in unknown_variables():
        logging.getLogger("service.settings").warning(line)
    for warning in _token_warnings(settings):
        logging.getLogger("service.settings").warning(warning)
    _ignore_web_concurrency()
    raise_open_file_limit()
    # outside uvicorn's run (its graceful stop), a stop signal exits through SystemExit, which stops the
    # embedded server in the exit's atexit acts (no orphan process), not by the signal's default action.
    # The console script's entry installed them already; a caller of ``run`` in its own process too.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, exit_cleanly)
    # the app's stop ends this process within its bound, and an embedded server with it (exit_guard.py)
    exit_guard.enable(last_acts=(end_all_now,))
    try:
        # an embedded server is stopped after the exit's waits for late work, which write to it
        with redis_for(settings, stop_at=exit_guard.after_the_waits) as ready:  # a Cluster: the app waits
            config = uvicorn.Config(
                create_app(ready, answer_cuts=True),  # a request the graceful wait cut: 503, not 500
                host=ready.host,
                port=ready.port,
                log_config=None,
                access_log=False,
                workers=1,  # one process per replica: see _ignore_web_concurrency
                timeout_graceful_shutdown=settings.graceful_shutdown_s,  # ROLLOUT_GRACEFUL_SHUTDOWN_S
            )
            server = CountingServer(config)
            server.run()
            if not server.started:  # as ``uvicorn.run`` ends a run that never served
                raise SystemExit(STARTUP_FAILURE)
    except EmbeddedServerError as error:
        _fail(str(error))


def raise_open_file_limit() -> None:
    """Raise the soft open-file limit to the hard one. Each connection holds a descriptor, and one
    that never finishes its request head holds it for good (uvicorn has no timeout for it): at the
    soft limit, 1,024 where a runtime leaves it there, the listener accepts nothing more, and every
    trainer's request and ``/readyz`` wait out their timeouts in the backlog (docs/operations.md,
    "Security"). Such a connection costs the process a few KB, so the hard limit is the bar to
    hold; Go's runtime raises its soft limit the same way. Left as it is where it cannot be raised."""
    try:
        import resource
    except ImportError:  # not a POSIX system: nothing to raise
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == hard:  # macOS's unlimited hard limit is not settable
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as error:
        logging.getLogger("service.serve").warning("open-file limit left at %d: %s", soft, error)


def _token_warnings(settings: Settings) -> list[str]:
    """What ``serve`` says at start about its tokens: the short ones (by count, never quoted), and
    worker tokens bound to no worker."""
    from service.auth.tokens import short_warning
    from service.auth.worker_tokens import unbound_warning
    from service.settings import variable_name

    warnings = [
        short_warning(variable_name("trainer_tokens"), settings.trainer_token_list()),
        short_warning(variable_name("worker_tokens"), settings.worker_token_list()),
        unbound_warning(settings.worker_token_entries()),
    ]
    return [warning for warning in warnings if warning is not None]


def _ignore_web_concurrency() -> None:
    """Say that ``WEB_CONCURRENCY`` (set by many base images) does not apply. uvicorn reads it as a
    worker count and, given an app object, refuses more than one by exiting; and a replica is one
    process by design: its metrics registry, plan slots and reaper are per process, so worker
    processes would each answer a scrape with their own counts. Scale with replicas instead."""
    value = os.environ.get("WEB_CONCURRENCY")
    if value is not None and value.strip() != "1":
        logging.getLogger("service.settings").warning(
            "WEB_CONCURRENCY=%s is ignored: serve runs one process per replica; run more replicas", value
        )


def _fail(message: str) -> NoReturn:
    """Refuse with ``message`` and status 2, which a stop signal meanwhile leaves as it is."""
    from service.cli import exit_decided

    exit_decided()
    typer.echo(f"serve: {message}", err=True)
    raise typer.Exit(2)

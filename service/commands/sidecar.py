"""``rollout-scheduler sidecar``: the process beside each inference engine that feeds it planned work.

Push mode (``--engine-url``) sends items to the engine's OpenAI-compatible API itself; pull mode
(``--pull-api PORT``) serves ``GET /next`` / ``POST /done`` on loopback for a worker process that
drives its engine itself. docs/sidecar.md describes both, the flags and the shutdown behaviour;
``sidecar_checks`` refuses a flag that makes no sense before anything connects.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from service.commands.sidecar_checks import checked

if TYPE_CHECKING:
    from service.sidecar.launch import SidecarOptions
    from service.sidecar.session import SessionStats

HELP = (
    "Run beside one inference engine: claim this worker's planned items from Redis (stealing when its "
    "queue is empty), keep the engine at its concurrency (and KV budget when the plan asks), heartbeat "
    "leases, report results; SIGTERM stops claiming and finishes or releases what it holds."
)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Attach ``sidecar`` to the root app."""
    del bench_app
    app.command("sidecar", help=HELP)(sidecar)


# The flags, one alias each, so the command's signature reads as a list of names and defaults.
WorkerIdFlag = Annotated[str, typer.Option(help="This worker's id, as the inventory names it.")]
EngineUrlFlag = Annotated[
    str | None, typer.Option(help="Engine base URL (push mode), e.g. http://127.0.0.1:8000.")
]
# Both names the service reads (``Settings.redis_url``), the first one set winning as there
REDIS_URL_VARIABLES = ("REDIS_URL", "ROLLOUT_REDIS_URL")  # an empty one too: ``_redis_url``
RedisUrlFlag = Annotated[
    str | None,
    typer.Option(
        envvar=list(REDIS_URL_VARIABLES),
        help="Redis URL, the service's: REDIS_URL, else ROLLOUT_REDIS_URL.",
    ),
]
RedisPasswordFlag = Annotated[
    str | None,
    typer.Option(
        envvar="ROLLOUT_REDIS_PASSWORD",
        help="Redis password, when not in the URL (use the env).",
        show_default=False,
    ),
]
RedisUsernameFlag = Annotated[
    str | None,
    typer.Option(envvar="ROLLOUT_REDIS_USERNAME", help="Redis ACL user, when not in the URL."),
]
RedisCaFlag = Annotated[
    str | None,
    typer.Option(envvar="ROLLOUT_REDIS_TLS_CA_FILE", help="CA bundle to verify a rediss:// server."),
]
PullApiFlag = Annotated[
    int | None, typer.Option(help="Serve the local pull API on this port instead of pushing.")
]
MaxNumSeqsFlag = Annotated[int, typer.Option(help="The engine's concurrent-sequence limit.")]
KvCapacityFlag = Annotated[
    int | None, typer.Option(help="The engine's KV cache, tokens (for plans with KV admission).")
]
DeviceFlag = Annotated[
    str | None, typer.Option(help="Derive the KV capacity from this device kind (and --model).")
]
ModelFlag = Annotated[str, typer.Option(help="Model preset for --device: 1.5b, 7b, 14b, 32b.")]
NumGpusFlag = Annotated[int, typer.Option(help="Tensor-parallel degree for --device.")]
EngineModelFlag = Annotated[str | None, typer.Option(help="Model id to request; default: first.")]
SyntheticFlag = Annotated[
    bool, typer.Option(help="Send placeholder prompts for items without text (engine-sim demos).")
]
StealFlag = Annotated[bool, typer.Option(help="Steal when the own queue is empty.")]
ReapFlag = Annotated[bool, typer.Option(help="Reap lapsed leases of schedules found empty.")]
DrainFlag = Annotated[float, typer.Option(help="Seconds running items may finish on SIGTERM.")]
IdlePollFlag = Annotated[float, typer.Option(help="Seconds between looks for work when idle.")]
StallFlag = Annotated[
    float,
    typer.Option(help="Push mode: release running items when the engine is silent this many seconds."),
]
HangFlag = Annotated[
    float,
    typer.Option(
        help="Push mode: close the request and hand back an item the engine has not answered in this "
        "many seconds while it answers /health (a stuck sequence); longer for an item whose "
        "max_new_tokens takes longer at a quarter of the measured decode rate. Charged as a strike: "
        "an item that hangs every time is dead-lettered after its attempts."
    ),
]
HeartbeatFlag = Annotated[
    float | None,
    typer.Option(
        help="Seconds between heartbeats; default a third of the lease TTL. One not shorter than a "
        "held schedule's lease TTL is not kept to (a warning says so; the default is used)."
    ),
]
PullIdleFlag = Annotated[
    float, typer.Option(help="Pull mode: stop heartbeating a worker silent this many seconds.")
]
PullHoldFlag = Annotated[
    float,
    typer.Option(
        help="Pull mode: report failed (requeue) an item the worker holds unreported this long "
        "(longer for an item whose max_new_tokens takes longer at a quarter of the measured decode rate)."
    ),
]
HealthPortFlag = Annotated[
    int | None,
    typer.Option(help="Push mode: serve GET /health (liveness probe) on this port."),
]
HealthHostFlag = Annotated[
    str, typer.Option(help="Address for --health-port; 0.0.0.0 for a Kubernetes probe.")
]
PrefixFlag = Annotated[
    str, typer.Option(envvar="ROLLOUT_KEY_PREFIX", help="Redis key prefix; must equal the service's.")
]
EngineKeyFlag = Annotated[
    str | None,
    typer.Option(envvar="ROLLOUT_ENGINE_API_KEY", help="Engine bearer token (ps shows flags)."),
]
ClusterFlag = Annotated[
    bool,
    typer.Option(
        envvar="ROLLOUT_REDIS_CLUSTER", help="The Redis URL names a cluster node (as the service's)."
    ),
]
LogLevelFlag = Annotated[
    str,
    typer.Option(
        envvar="ROLLOUT_LOG_LEVEL", help="DEBUG, INFO, WARNING or ERROR (as the service's variable)."
    ),
]


def sidecar(
    ctx: typer.Context,
    worker_id: WorkerIdFlag,
    engine_url: EngineUrlFlag = None,
    redis_url: RedisUrlFlag = None,
    redis_password: RedisPasswordFlag = None,
    redis_username: RedisUsernameFlag = None,
    redis_tls_ca_file: RedisCaFlag = None,
    pull_api: PullApiFlag = None,
    max_num_seqs: MaxNumSeqsFlag = 256,
    kv_capacity_tokens: KvCapacityFlag = None,
    device: DeviceFlag = None,
    model: ModelFlag = "7b",
    num_gpus: NumGpusFlag = 1,
    engine_model: EngineModelFlag = None,
    synthetic_prompts: SyntheticFlag = False,
    steal: StealFlag = True,
    reap: ReapFlag = True,
    drain_timeout: DrainFlag = 20.0,
    idle_poll: IdlePollFlag = 0.2,
    engine_stall_timeout: StallFlag = 30.0,
    engine_hang_timeout: HangFlag = 3600.0,
    heartbeat_interval: HeartbeatFlag = None,
    pull_idle_timeout: PullIdleFlag = 60.0,
    pull_hold_timeout: PullHoldFlag = 3600.0,
    health_port: HealthPortFlag = None,
    health_host: HealthHostFlag = "127.0.0.1",
    prefix: PrefixFlag = "rs",
    engine_api_key: EngineKeyFlag = None,
    cluster: ClusterFlag = False,
    log_level: LogLevelFlag = "INFO",
) -> None:
    """Validate the flags, then serve until SIGTERM; print the final counters as one JSON line. A
    SIGTERM or SIGINT before the run handles them stops it at once, exit 0 (``early_stop``). A crash,
    in the run or before it, prints the line too, with its ``error`` (``_crashed``)."""
    from service.sidecar import early_stop

    owns_process = _owns_process(ctx)
    if owns_process:
        early_stop.arm()  # first: the run's own handlers come only once it runs
    stats: SessionStats | None = None
    try:
        from service.sidecar.launch import SidecarOptions
        from service.sidecar.session_settings import SessionStats

        stats = SessionStats()  # the run counts into it: a run that raised leaves its counts here

        redis_url, url_from = _redis_url(ctx, redis_url)
        options = SidecarOptions(
            worker_id=worker_id,
            redis_url=redis_url or "",
            redis_password=redis_password,
            redis_username=redis_username,
            redis_tls_ca_file=redis_tls_ca_file,
            engine_url=engine_url,
            pull_api_port=pull_api,
            prefix=prefix,
            cluster=cluster,
            max_num_seqs=max_num_seqs,
            kv_capacity_tokens=kv_capacity_tokens,
            engine_model=engine_model,
            engine_api_key=engine_api_key,
            synthetic_prompts=synthetic_prompts,
            steal=steal,
            reap_when_idle=reap,
            heartbeat_interval_s=heartbeat_interval,
            idle_poll_s=idle_poll,
            drain_timeout_s=drain_timeout,
            engine_stall_s=engine_stall_timeout,
            engine_hang_s=engine_hang_timeout,
            pull_idle_timeout_s=pull_idle_timeout,
            pull_hold_timeout_s=pull_hold_timeout,
            health_port=health_port,
            health_host=health_host,
        )
        _run(options, log_level, (device, model, num_gpus), url_from, owns_process, stats)
    except early_stop.StoppedBeforeRunError as stopped:
        stopped_before_run(worker_id, stopped.signal_name)
    except typer.Exit:  # an exit the command decided (a refused flag, a run that raised): its line said
        raise
    except Exception as exc:  # a crash, in the run or before it: its exit is decided, 1
        _crashed(worker_id, stats, exc, owns_process)
        raise


def stopped_before_run(worker_id: str, signal_name: str) -> None:
    """A stop signal came before the run handled it (``early_stop``): nothing was claimed, so the
    stop is done. Say so, and print the counters line, all zero, as a stopped run does."""
    import logging

    from service.sidecar.session_settings import SessionStats

    log = logging.getLogger("service.sidecar")
    log.warning("%s before the run started: stopped, nothing claimed", signal_name)
    typer.echo(json.dumps({"worker_id": worker_id, **asdict(SessionStats())}))


def _owns_process(ctx: typer.Context) -> bool:
    """Whether the console script runs this command (``service.cli.main``): the process ends with
    it, so its signal handlers are the command's to change; a caller's own process keeps its own."""
    from service.cli import OWNS_PROCESS

    return bool(ctx.find_root().obj == OWNS_PROCESS)


def _redis_url(ctx: typer.Context, flag: str | None) -> tuple[str | None, str | None]:
    """The Redis URL and where it was read (``--redis-url`` or a variable; None: nowhere): the flag,
    else the first of ``REDIS_URL`` and ``ROLLOUT_REDIS_URL`` that is set, even to nothing, as
    ``Settings`` reads them. Click's own lookup skips an empty variable, so a sidecar beside an empty
    ``REDIS_URL`` read ``ROLLOUT_REDIS_URL`` and served where ``serve`` refused to start."""
    source = ctx.get_parameter_source("redis_url")  # by name: typer vendors its own click
    if source is not None and source.name == "COMMANDLINE":
        return flag, "--redis-url"
    for variable in REDIS_URL_VARIABLES:
        if variable in os.environ:
            return os.environ[variable], variable
    return None, None


def _run(
    options: SidecarOptions,
    log_level: str,
    kv_source: tuple[str | None, str, int],
    url_from: str | None,
    owns_process: bool,
    stats: SessionStats,
) -> None:
    """The command once its flags are gathered: a flag that makes no sense is one line on stderr and
    exit code 2 before anything connects; otherwise serve until SIGTERM and print the final counters
    as one JSON line."""
    from service import logs
    from service.sidecar import early_stop

    try:
        with early_stop.deciding(ValueError):  # a refused flag: nothing in the checks retries one
            options = checked(options, log_level, kv_source, url_from)
    except ValueError as exc:
        _exit_with(2, str(exc), owns_process)
    logs.configure(log_level.upper(), fields={"worker_id": options.worker_id})
    _serve(options, stats, owns_process)
    _counters_line(options.worker_id, stats)


def _counters_line(worker_id: str, stats: SessionStats, error: str | None = None) -> None:
    """The counters as one JSON line on stdout, what a fleet's logs are grepped for: ``error`` last,
    where the run raised (what it had counted before is in the line all the same)."""
    line: dict[str, object] = {"worker_id": worker_id, **asdict(stats)}
    if error is not None:
        line["error"] = error
    typer.echo(json.dumps(line))


def _serve(options: SidecarOptions, stats: SessionStats, owns_process: bool = False) -> None:
    """Run the sidecar in its mode until SIGTERM, counting into ``stats``. What no wait fixes (a port
    taken, a wrong password, an old Redis) is exit code 2; a loop of the sidecar that died (a bug:
    logged CRITICAL with its traceback, what it held handed back) is exit code 70, for the supervisor
    to restart it (``service/sidecar/supervision.py``). Either prints the counters line, with what the
    run had counted and its ``error`` (a raised run printed its stderr line alone, and an operator
    grepping a fleet's counters lines missed it), then that one line on stderr. Anything else the run
    raises is a bug, and goes on to the command (``_crashed``: the counters line too, exit 1)."""
    from service.redis_conn import RedisRefusedError, RedisTooOldError
    from service.sidecar import early_stop
    from service.sidecar.launch import CannotListenError, run_pull, run_push
    from service.sidecar.supervision import EXIT_LOOP_DIED, LoopDiedError

    run = run_pull if options.pull_api_port is not None else run_push
    try:  # a port taken decides it too, where ``launch`` binds it (the health port, the pull API's)
        with early_stop.deciding(RedisRefusedError, RedisTooOldError, LoopDiedError):
            run(options, stats)
    except CannotListenError as exc:  # a port to listen on that is taken, or not ours to take
        _raised(options.worker_id, stats, (2, f"cannot listen: {exc}"), owns_process)
    except (RedisRefusedError, RedisTooOldError) as exc:  # a wrong password, an old Redis: no wait fixes
        _raised(options.worker_id, stats, (2, str(exc)), owns_process)
    except LoopDiedError as exc:
        _raised(options.worker_id, stats, (EXIT_LOOP_DIED, str(exc)), owns_process)
    if owns_process:  # a caller's own process (a test's CliRunner) keeps hearing Ctrl-C and SIGTERM
        _deaf_to_stop_signals()  # a run returns only once SIGTERM or SIGINT stopped it


def _raised(worker_id: str, stats: SessionStats, exit_: tuple[int, str], owns_process: bool) -> NoReturn:
    """A run that raised: the counters line with what it had counted and why it ended, then the
    command's exit (``exit_``: its status and its one line on stderr), deaf first (``_exit_with``)."""
    if owns_process:
        _deaf_to_stop_signals()
    _counters_line(worker_id, stats, exit_[1])
    _exit_with(*exit_, owns_process)


def _crashed(worker_id: str, stats: SessionStats | None, exc: Exception, owns_process: bool) -> None:
    """A crash, what nothing expects (a bug; an ``OSError`` that is no port's), in the run or before it
    (the logging's set-up, the run's imports in a broken install, a bug in the checks): the counters
    line, with what the run had counted (all zero before it) and, as ``error``, the last line of the
    traceback that follows on stderr (exit 1, as any uncaught exception's), deaf first where it owns
    the process: the crash's report (the logging's hook) runs with no exception in flight, and a stop
    landing there raised the early stop's exit 0 over it (finish56). A run's crash printed its
    traceback alone until helper review47c, one before the run until edges57: a fleet's logs grepped
    for the counters lines, then ``error``, missed it. None where even the counters' module did not
    import: no line to print."""
    import traceback

    if owns_process:
        _deaf_to_stop_signals()
    if stats is not None:
        _counters_line(worker_id, stats, traceback.format_exception_only(exc)[-1].strip())


def _exit_with(status: int, reason: str, owns_process: bool) -> NoReturn:
    """End the command with ``status`` and one line saying why (a bad flag or a refusal, 2; a loop's
    death, 70), deaf to the stop signals first where it owns the process: its exit is decided, and a
    SIGTERM landing in it (an operator's second ``kill``) met the default (-15, not the status) or,
    before the run, the early handler (exit 0, a clean stop's zero counters after the refusal)."""
    if owns_process:
        _deaf_to_stop_signals()
    typer.echo(f"sidecar: {reason}", err=True)
    raise typer.Exit(status) from None


def _deaf_to_stop_signals() -> None:
    """Ignore SIGTERM and SIGINT from here on: the command's exit is decided (its run returned or
    raised, a flag was refused), and what is left is its last line (the counters, or why it failed)
    and the interpreter's teardown (0.1-0.5 s, seconds on a loaded host). The interpreter puts Python
    handlers back to their defaults as it finalizes (push mode's event loop did as it closed, before
    ``stop_relay``), so a second signal landing now (an operator's second ``kill``, a second Ctrl-C)
    killed the process by the signal (status 143 or 130, not 0, 2 or 70) or raised KeyboardInterrupt
    in an ``atexit`` hook, a traceback in the log (chaos8's soak). An ignored signal stays ignored
    through finalization; SIGKILL still ends a teardown that hangs. Only in a process the console
    script owns: a caller running the command in its own process (the tests' ``CliRunner``) was left
    deaf to Ctrl-C and SIGTERM (helper review44c)."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)

"""The ``sidecar`` command's flag checks: every flag that makes no sense is refused before anything connects.

Apart from the command (``sidecar.py``, its flags and what it runs) because the checks are a concept
of their own, and the one that grows: each new flag brings its bound, each refusal names the flag
and its value, as ``serve``'s do, and the order they run in is the order a user meets them. Imports
stay inside the functions: a sidecar's start-up loads nothing it does not run
(``tests/service/sidecar/test_startup_imports.py``).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from service.sidecar.launch import SidecarOptions


def checked(
    options: SidecarOptions, log_level: str, kv_source: tuple[str | None, str, int], url_from: str | None
) -> SidecarOptions:
    """``options`` once every flag makes sense, with the KV capacity derived from ``--device`` when it
    was not given; ``ValueError`` naming the first flag that does not (checked in this order)."""
    from service.auth.tokens import check_token_flag
    from service.delivery.key_prefix import check_prefix

    o = options
    url = check_connections(o.redis_url, o.engine_url, o.pull_api_port, o.health_port, log_level, url_from)
    check_prefix(o.prefix)
    check_worker_id(o.worker_id)
    check_token_flag("--engine-api-key", o.engine_api_key)
    _check_numbers(
        {
            "max-num-seqs": (o.max_num_seqs, 1),
            "num-gpus": (kv_source[2], 1),
            "kv-capacity-tokens": (o.kv_capacity_tokens, 1),
            "pull-api": (o.pull_api_port, 0),  # 0: a port the kernel picks, logged once bound
            "health-port": (o.health_port, 0),
            "drain-timeout": (o.drain_timeout_s, 0),
            "idle-poll": (o.idle_poll_s, 0.001),
            "engine-stall-timeout": (o.engine_stall_s, 1.0),
            "engine-hang-timeout": (o.engine_hang_s, 1.0),
            "heartbeat-interval": (o.heartbeat_interval_s, 0.001),
            "pull-idle-timeout": (o.pull_idle_timeout_s, 0.001),
            "pull-hold-timeout": (o.pull_hold_timeout_s, 1.0),
        }
    )
    kv = o.kv_capacity_tokens if o.kv_capacity_tokens is not None else _derived_kv(*kv_source)
    _check_listening(o)
    return replace(o, redis_url=url, kv_capacity_tokens=kv)


def _check_listening(o: SidecarOptions) -> None:
    """``ValueError`` when the port the sidecar would serve on cannot be bound, naming the address and
    the flag to change, as ``serve`` names ``--port``: the bind's own ``OSError`` named neither."""
    from service.ports import listen_refusal

    for refusal in (
        o.pull_api_port is not None and listen_refusal(o.pull_api_host, o.pull_api_port, "--pull-api"),
        o.health_port is not None
        and listen_refusal(o.health_host, o.health_port, "--health-port", "--health-host"),
    ):
        if refusal:
            raise ValueError(refusal)


def check_connections(
    url: str | None,
    engine_url: str | None,
    pull_api: int | None,
    health_port: int | None,
    log_level: str,
    url_from: str | None = "--redis-url",
) -> str:
    """The Redis URL, once the flags that say where to connect and how to run make sense together;
    ``ValueError`` naming the first that does not."""
    from service.logs import LOG_LEVELS
    from service.redis_conn import describe

    url = _check_redis_url(url, url_from)
    if (engine_url is None) == (pull_api is None):
        raise ValueError("pass exactly one of --engine-url (push mode) or --pull-api PORT (pull mode)")
    if engine_url is not None and not engine_url.startswith(("http://", "https://")):
        shown = describe(engine_url)  # a password in it is never printed
        raise ValueError(f"engine_url={shown!r}: expected an http:// or https:// base URL")
    if health_port is not None and pull_api is not None:
        raise ValueError(
            "--health-port is for push mode; in pull mode GET /health and /metrics are on the pull API"
        )
    for name, port in (("pull-api", pull_api), ("health-port", health_port)):
        if port is not None and port > 65535:
            raise ValueError(f"{name}={port}: a port is at most 65535")
    if log_level.upper() not in LOG_LEVELS:
        raise ValueError(f"log-level={log_level!r}: expected one of {', '.join(LOG_LEVELS)}")
    return url


def _check_redis_url(url: str | None, url_from: str | None) -> str:
    """``url`` when Redis can be reached by it; ``ValueError`` naming where it came from: the flag
    as ``redis_url`` (as every command's ``--redis-url`` is named), a variable by its name (as
    ``serve`` names it), empty included (``check_redis_url``)."""
    from service.redis_conn import check_redis_url, check_redis_url_flag, describe

    if url_from is None:
        raise ValueError("no Redis: pass --redis-url or set REDIS_URL (or ROLLOUT_REDIS_URL)")
    if url_from == "--redis-url":
        return check_redis_url_flag(url or "")
    try:
        return check_redis_url(url or "")
    except ValueError as error:
        raise ValueError(f"{url_from}={describe(url or '')!r}: {error}") from None


def check_worker_id(worker_id: str) -> None:
    """Refuse a worker id the API would refuse (its ``worker_id`` rule): an empty or odd id would
    otherwise claim from a queue no plan ever fills, or report actuals the API turns away. The rule
    without pydantic (``service/names.py``): push mode loads none."""
    from service.names import name_error

    error = name_error(worker_id)
    if error is not None:
        raise ValueError(f"worker-id={worker_id!r}: {error}")


def _check_numbers(numbers: dict[str, tuple[float | None, float]]) -> None:
    """``ValueError`` for the first flag below its least sensible value (a heartbeat of 0 s spins a
    core) or not finite (``--idle-poll inf`` never looked for work again, ``--heartbeat-interval inf``
    let every lease lapse while its item ran)."""
    for name, (value, least) in numbers.items():
        if value is not None and not value >= least:
            raise ValueError(f"{name}={value}: must be >= {least:g}")
        if value is not None and not math.isfinite(value):
            raise ValueError(f"{name}={value}: must be a finite number")


def _derived_kv(device: str | None, model: str, num_gpus: int) -> int | None:
    """The KV capacity an engine on ``device`` would allocate, or None without a device."""
    if device is None:
        return None
    from scheduler.costmodel import derived_kv_capacity
    from scheduler.devices import device_profile, model_preset
    from scheduler.types import Worker

    worker = Worker(worker_id="sidecar", device=device_profile(device), num_gpus=num_gpus)
    kv = derived_kv_capacity(worker, model_preset(model))
    if kv < 1:
        raise ValueError(f"model {model} leaves no KV cache on {num_gpus} x {device} ({kv} tokens)")
    return kv

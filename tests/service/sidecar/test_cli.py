"""The two commands: bad flags get one clear line and exit 2; pull mode works as a real process."""

from __future__ import annotations

import signal
import socket
from pathlib import Path

import httpx
import pytest
import redis
import typer
from pydantic import TypeAdapter, ValidationError
from typer.testing import CliRunner

from service.api.schemas import Name
from service.commands import engine_sim, sidecar
from service.delivery import keys
from service.delivery.protocol import Delivery
from service.names import name_error
from service.problems.details import error_words
from tests.service.sidecar.procs import bound_url, cluster, item, publish, wait_http, wait_until


def _app() -> typer.Typer:
    app, bench = typer.Typer(), typer.Typer()
    app.add_typer(bench, name="bench")
    engine_sim.register(app, bench)
    sidecar.register(app, bench)
    return app


PUSH = ["sidecar", "--worker-id", "w", "--redis-url", "redis://r", "--engine-url", "http://e"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["engine-sim", "--port", "1", "--device", "X900"], "device='X900': unknown"),
        (["engine-sim", "--port", "1", "--device", "H100", "--time-scale", "0"], "time_scale=0.0"),
        (["engine-sim", "--port", "1", "--device", "H100", "--trace", "/nonexistent.csv"], "no such file"),
        (["sidecar", "--worker-id", "w", "--engine-url", "http://e"], "pass --redis-url or set REDIS_URL"),
        (["sidecar", "--worker-id", "w", "--redis-url", "redis://r"], "exactly one of --engine-url"),
        ([*PUSH, "--device", "Z"], "Z"),
        (
            [
                "sidecar",
                "--worker-id",
                "w",
                "--redis-url",
                "redis://r",
                "--pull-api",
                "9",
                "--health-port",
                "8",
            ],
            "--health-port is for push mode",
        ),
        (["sidecar", "--worker-id", "w", "--redis-url", "notaurl", "--engine-url", "http://e"], "redis_url"),
        (["sidecar", "--worker-id", "w", "--redis-url", "redis://r", "--engine-url", "e"], "engine_url"),
        (["sidecar", "--worker-id", "w", "--redis-url", "redis://r", "--pull-api", "99999"], "at most 65535"),
        ([*PUSH, "--health-port", "70000"], "health-port=70000: a port is at most 65535"),
        ([*PUSH, "--health-port", "-1"], "health-port=-1: must be >= 0"),
        ([*PUSH, "--log-level", "LOUD"], "log-level"),
        ([*PUSH, "--heartbeat-interval", "0"], "heartbeat-interval=0.0"),
        ([*PUSH, "--idle-poll", "0"], "idle-poll"),
        ([*PUSH, "--drain-timeout", "-1"], "drain-timeout"),
        ([*PUSH, "--engine-stall-timeout", "0.5"], "engine-stall-timeout=0.5: must be >= 1"),
        ([*PUSH, "--idle-poll", "inf"], "idle-poll=inf: must be a finite number"),
        ([*PUSH, "--heartbeat-interval", "inf"], "heartbeat-interval=inf: must be a finite number"),
        ([*PUSH, "--drain-timeout", "inf"], "drain-timeout=inf: must be a finite number"),
        ([*PUSH, "--engine-stall-timeout", "1e400"], "engine-stall-timeout=inf: must be a finite number"),
        ([*PUSH, "--engine-hang-timeout", "0.5"], "engine-hang-timeout=0.5: must be >= 1"),
        ([*PUSH, "--engine-hang-timeout", "nan"], "engine-hang-timeout=nan: must be >= 1"),
        ([*PUSH, "--kv-capacity-tokens", "-5"], "kv-capacity-tokens"),
        ([*PUSH, "--device", "H100", "--num-gpus", "0"], "num-gpus"),
        ([*PUSH, "--device", "Ascend910B", "--model", "32b"], "leaves no KV cache"),
        ([*PUSH, "--prefix", "rs{1}"], "key prefix 'rs{1}'"),
        ([*PUSH, "--engine-api-key", "tökén"], "--engine-api-key: a token must be printable ASCII"),
        (["sidecar", "--worker-id", "", *PUSH[3:]], "worker-id='': String should have at least 1 character"),
        (
            ["sidecar", "--worker-id", "gpu 0", *PUSH[3:]],
            "worker-id='gpu 0': ' ' (character 3) is not allowed",
        ),
        (["sidecar", "--worker-id", "w" * 257, *PUSH[3:]], "String should have at most 256 characters"),
    ],
)
def test_bad_flags_get_one_line_naming_the_problem_and_exit_status_2(
    args: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.delenv("ROLLOUT_REDIS_URL", raising=False)
    result = CliRunner().invoke(_app(), args)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("env", "read"),
    [
        ({"ROLLOUT_REDIS_URL": "http://rollout-name"}, "http://rollout-name"),
        ({"REDIS_URL": "http://plain-name"}, "http://plain-name"),
        ({"REDIS_URL": "http://plain-name", "ROLLOUT_REDIS_URL": "http://rollout-name"}, "http://plain-name"),
    ],
)
def test_the_sidecar_reads_the_redis_url_under_both_names_the_service_does_redis_url_first(
    env: dict[str, str], read: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It read ``REDIS_URL`` alone: a deployment that named the service's Redis ``ROLLOUT_REDIS_URL``
    (``Settings`` takes both, ``REDIS_URL`` first) started its sidecars with "no Redis". The URLs
    here are refused on purpose: the refusal names the one that was read, and the variable it was
    read from, before anything connects."""
    variable = "REDIS_URL" if "REDIS_URL" in env else "ROLLOUT_REDIS_URL"
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.delenv("ROLLOUT_REDIS_URL", raising=False)
    result = CliRunner().invoke(_app(), ["sidecar", "--worker-id", "w", "--engine-url", "http://e"], env=env)
    assert result.exit_code == 2
    assert f"{variable}={read!r}: expected redis://" in result.output


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"REDIS_URL": ""}, "REDIS_URL"),
        ({"ROLLOUT_REDIS_URL": ""}, "ROLLOUT_REDIS_URL"),
        # serve refuses this empty REDIS_URL; the sidecar read ROLLOUT_REDIS_URL past it, and ran
        ({"REDIS_URL": "", "ROLLOUT_REDIS_URL": "redis://127.0.0.1:1/0"}, "REDIS_URL"),
    ],
)
def test_a_redis_url_variable_set_to_nothing_is_one_line_naming_it_as_serve_refuses_it(
    env: dict[str, str], variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty variable was skipped as unset: alone it was "no Redis: ... set REDIS_URL", of a
    variable that was set, and beside ``ROLLOUT_REDIS_URL`` the sidecar served another URL than the
    one ``serve`` refuses to start with."""
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.delenv("ROLLOUT_REDIS_URL", raising=False)
    result = CliRunner().invoke(_app(), ["sidecar", "--worker-id", "w", "--engine-url", "http://e"], env=env)
    assert result.exit_code == 2
    assert result.output.startswith(f"sidecar: {variable}='': set but empty; expected"), result.output
    assert len(result.output.strip().splitlines()) == 1


def test_the_redis_url_flag_wins_over_an_empty_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flags override the environment: the URL checked (refused here on purpose) is the flag's."""
    monkeypatch.setenv("REDIS_URL", "")
    args = ["sidecar", "--worker-id", "w", "--engine-url", "http://e", "--redis-url", "http://flag"]
    result = CliRunner().invoke(_app(), args)
    assert result.exit_code == 2
    assert "redis_url='http://flag': expected redis://" in result.output


@pytest.mark.parametrize(
    "worker_id",
    ["", "w0", "gpu 0", "w" * 256, "w" * 257, "!" * 300, "w0\n", "\n", "wörker", "a.b:c@d/e+f=g-h_9"],
)
def test_the_sidecar_s_worker_id_rule_is_the_api_s_in_the_api_s_words(worker_id: str) -> None:
    """The sidecar checks its id without pydantic (push mode loads none); the API checks it with, and
    says its characters in words (``error_words``), not as pydantic's pattern (user67)."""
    try:
        TypeAdapter(Name).validate_python(worker_id)
        api = None
    except ValidationError as error:
        api = error_words(error.errors()[0])
    assert name_error(worker_id) == api


@pytest.mark.slow
def test_pull_mode_keeps_a_pulled_lease_alive_and_hands_back_what_it_holds_on_sigterm(
    redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    delivery = Delivery.from_url(redis_url)
    # kept alive is told by the renewal in Redis, not by outliving the TTL: a 2.5 s sleep over 1 s
    # leases passed with the pull heartbeats never sent, since the /done after that silence found an
    # outage and graced both leases (``pulse`` in common.lua). 12 s leases are renewed 4 s on.
    publish(delivery, "pull", {"w0": [item("a", 0, 5), item("b", 0, 5)]}, lease_ttl_ms=12_000)
    with cluster(tmp_path) as procs:
        worker = procs.spawn(
            "pull", ["sidecar", "--worker-id", "w0", "--pull-api", "0", "--redis-url", redis_url]
        )
        base = bound_url(worker)  # the kernel's pick
        wait_http(f"{base}/ready", worker)  # /next answers 204 until then (docs/sidecar.md, GET /ready)
        first = httpx.get(f"{base}/next").json()
        second = httpx.get(f"{base}/next").json()
        deadlines = keys.schedule_keys("pull").deadlines  # Redis extends only a lease still current
        leased = {lease["key"]: lease["deadline_ms"] for lease in (first, second)}
        wait_until(
            lambda: all((redis_client.zscore(deadlines, k) or 0) > ms for k, ms in leased.items()),
            60,  # due 4 s on: a bound against never
            "both leases renewed by the sidecar's heartbeats",
        )
        done = httpx.post(
            f"{base}/done",
            json={**{k: first[k] for k in ("schedule_id", "key", "token")}, "output_tokens": 5},
        )
        assert done.json() == {"outcome": "accepted"}
        worker.signal(signal.SIGTERM)
        stats = worker.stats()
    assert (first["key"], second["key"]) == ("a#0", "b#0")
    assert (stats["accepted"], stats["released"], stats["lost"]) == (1, 1, 0)
    progress = delivery.progress("pull")
    assert (progress.done, progress.queued, progress.running) == (1, 1, 0)


@pytest.mark.parametrize(
    ("url", "secret"),
    [
        ("redis://:s3cr/et#x@r:6379/0", "s3cr"),
        ("redis://u:12/s3cr@r:6379/0", "s3cr"),  # the port reads; the rest lands in the database
    ],
)
def test_a_url_refused_for_an_unescaped_password_does_not_print_the_password(
    url: str, secret: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    output = _refused(monkeypatch, redis_url=url, engine_url="http://e")
    assert "percent-encoded" in output
    assert secret not in output


def test_an_engine_url_refused_for_its_scheme_does_not_print_its_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    output = _refused(monkeypatch, redis_url="redis://r", engine_url="rollout:s3cret@engine:8000")
    assert "expected an http:// or https:// base URL" in output
    assert "s3cret" not in output


def _refused(monkeypatch: pytest.MonkeyPatch, redis_url: str, engine_url: str) -> str:
    """What ``sidecar`` prints refusing these URLs (exit status 2: the flags' fault)."""
    monkeypatch.delenv("REDIS_URL", raising=False)
    args = ["sidecar", "--worker-id", "w", "--engine-url", engine_url, "--redis-url", redis_url]
    result = CliRunner().invoke(_app(), args)
    assert result.exit_code == 2
    return result.output


def test_a_health_port_in_use_is_one_line_naming_the_address_and_flag_and_exit_2(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        args = [*PUSH, "--health-port", str(port)]
        result = CliRunner().invoke(_app(), args)
    assert result.exit_code == 2
    assert result.output == f"sidecar: 127.0.0.1:{port} is already in use (--health-port={port})\n"


def test_a_pull_api_port_in_use_is_one_line_naming_the_address_and_flag_and_exit_2(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        args = [
            "sidecar",
            "--worker-id",
            "w",
            "--redis-url",
            "redis://127.0.0.1:1/0",
            "--pull-api",
            str(port),
        ]
        result = CliRunner().invoke(_app(), args)
    assert result.exit_code == 2
    assert result.output == f"sidecar: 127.0.0.1:{port} is already in use (--pull-api={port})\n"


def test_a_health_host_not_of_this_machine_is_one_line_naming_that_flag(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """192.0.2.1 is TEST-NET-1 (RFC 5737): an address no interface of the test host holds."""
    monkeypatch.delenv("REDIS_URL", raising=False)
    args = [*PUSH, "--health-port", "9102", "--health-host", "192.0.2.1"]
    result = CliRunner().invoke(_app(), args)
    assert result.exit_code == 2
    assert result.output.startswith("sidecar: 192.0.2.1:9102 cannot be bound (")
    assert result.output.endswith(" (--health-host='192.0.2.1')\n")

"""``rollout-scheduler serve``: embedded Redis lifecycle, settings from flags and environment."""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr, ValidationError

from service.commands.bench_service import SAMPLES, batch
from service.commands.serve import cluster_without_url, unsafe_binding
from service.settings import HOUR_S, Settings, unknown_variables
from tests.service.bound_port import child_port
from tests.service.polling import GONE_WITHIN_S, gone_within, poller

PREFIX_RULE = "must be 1-64 of A-Z a-z 0-9 _ . : -"  # the key-prefix rule, as serve states it


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "zombie" not in status.read_text()


def _name(pid: int) -> str:
    """The command name of process ``pid``; empty once it is gone."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _serve_until_it_answers(
    path: str, preexec_fn: Callable[[], None] | None = None, **env_vars: str
) -> subprocess.Popen[bytes]:
    """``serve`` on a port the kernel picks (``bound_port.py``) with the embedded server (no
    ``REDIS_URL`` nor other ``ROLLOUT_*`` variable of this environment) and ``env_vars``, once ``path``
    answers 200 (within 60 s of its own time to listen, then 60 s)."""
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("ROLLOUT_")}
    env.update(env_vars)
    command = [sys.executable, "-c", "from service.cli import main; main()", "serve", "--port", "0"]
    proc = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=preexec_fn
    )
    try:
        port = child_port(proc, 60)
    except AssertionError:
        if proc.poll() is None:
            proc.kill()
        raise
    deadline = time.monotonic() + 60  # from the listen: the start is child_port's to bound
    with poller(1.0) as client:  # not httpx.get per ask: ~35 ms of CPU each (tests.service.polling)
        while True:
            if proc.poll() is not None:
                raise AssertionError(proc.stderr.read().decode() if proc.stderr else "serve exited")
            try:
                if client.get(f"http://127.0.0.1:{port}{path}").status_code == 200:
                    return proc
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(f"serve did not answer {path} within 60 s")
            time.sleep(0.1)


LONG_TOKEN = "a" * 64
SOFT_FILES = 256  # the soft open-file limit the served child starts under, where the hard one is higher


@dataclass(frozen=True)
class Served:
    """What one ``serve`` child on the embedded server showed while it answered ``/readyz``, then once
    a SIGTERM ended it. One child for the behaviours that do not change its state until the stop
    (a ``serve`` start is ~3 CPU-s of imports): started with a low soft open-file limit, with
    ``WEB_CONCURRENCY=2`` and with short tokens."""

    servers: list[int]  # its children while it served: the embedded server and its watcher
    open_files: tuple[int, int]  # its soft and hard open-file limits while it served
    hard_files: int  # the hard limit it inherited (its soft one: SOFT_FILES where lower)
    status: int  # its exit status after the SIGTERM
    left_running: list[int]  # of ``servers``, those still running 0.2 s after it exited
    said: str  # its stderr


def _hard_files() -> int:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[1]


def _low_soft_limit_settable(hard: int) -> bool:
    return hard != resource.RLIM_INFINITY and hard > SOFT_FILES


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Served:
    """``serve`` without ``REDIS_URL`` until it answers ``/readyz``, read, then SIGTERMed (as an
    operator stops it; a SIGKILLed one leaves its server to the watcher)."""
    hard = _hard_files()

    def low_soft_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (SOFT_FILES, hard))

    proc = _serve_until_it_answers(
        "/readyz",
        low_soft_limit if _low_soft_limit_settable(hard) else None,
        ROLLOUT_MODEL_DIR=str(tmp_path_factory.mktemp("served")),
        WEB_CONCURRENCY="2",
        ROLLOUT_TRAINER_TOKENS=f"short-trainer,{LONG_TOKEN}",
        ROLLOUT_WORKER_TOKENS=f"w0=short-worker,w1=b{LONG_TOKEN}",
    )
    try:
        servers, open_files = _children(proc.pid), _open_file_limits(proc.pid)
        proc.send_signal(signal.SIGTERM)
        status = proc.wait(timeout=20)
        assert proc.stderr is not None
        said = proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
    time.sleep(0.2)
    return Served(servers, open_files, hard, status, [pid for pid in servers if _alive(pid)], said)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads child processes from /proc")
def test_serve_without_redis_url_runs_an_embedded_server_and_stops_it_on_exit(served: Served) -> None:
    assert served.servers, "no embedded server process"
    assert served.status == 0
    assert served.left_running == []


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads child processes from /proc")
def test_a_sigkilled_serve_leaves_no_embedded_server_running(tmp_path: Path) -> None:
    """SIGKILL runs no cleanup in serve (the OOM killer, ``kill -9``): its embedded server went on
    running for good, holding its port and memory (one left a CI run, seen in ps)."""
    proc = _serve_until_it_answers("/readyz", ROLLOUT_MODEL_DIR=str(tmp_path))
    children = _children(proc.pid)
    servers = [pid for pid in children if _name(pid) == "valkey-server"]
    proc.kill()
    proc.wait()
    try:
        assert servers, "no embedded server process"
        assert all(gone_within(pid, GONE_WITHIN_S) for pid in children)  # the server and its watcher
    finally:
        for pid in servers:  # started by this test, and still valkey-server: end it
            if _alive(pid) and _name(pid) == "valkey-server":
                os.kill(pid, signal.SIGKILL)


def _open_file_limits(pid: int) -> tuple[int, int]:
    """The soft and hard ``Max open files`` of process ``pid``, from /proc."""
    lines = Path(f"/proc/{pid}/limits").read_text().splitlines()
    line = next(x for x in lines if x.startswith("Max open files"))
    soft, hard = line.split()[3:5]
    return int(soft), int(hard)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process's limits from /proc")
def test_serve_raises_its_open_file_limit_to_the_hard_limit(served: Served) -> None:
    """A connection that never finishes its request head holds a descriptor for good: at a soft limit
    of 1,024 a thousand of them left the listener accepting nothing (docs/experiments.md, "Leftovers")."""
    if not _low_soft_limit_settable(served.hard_files):
        pytest.skip(f"hard open-file limit {served.hard_files}: nothing to raise a soft limit of 256 to")
    assert served.open_files == (served.hard_files, served.hard_files)


@pytest.mark.slow
def test_serve_runs_one_process_whatever_web_concurrency_says(served: Served) -> None:
    """uvicorn reads WEB_CONCURRENCY (set by many base images) as its worker count, and with an app
    object rather than an import string it refuses more than one and exits: serve must serve."""
    assert served.status == 0  # it answered /readyz, then stopped as asked
    assert "WEB_CONCURRENCY=2 is ignored" in served.said


@pytest.mark.slow
def test_serve_warns_at_start_of_tokens_shorter_than_32_characters_without_quoting_them(
    served: Served,
) -> None:
    """A short token is guessable (nothing limits the rate of 401s): serve says how many each list
    holds, and starts anyway, since refusing would stop deployments that run on them today."""
    assert served.status == 0  # it started, answered /readyz and stopped as asked
    assert "ROLLOUT_TRAINER_TOKENS holds 1 token(s) shorter than 32 characters" in served.said
    assert "ROLLOUT_WORKER_TOKENS holds 1 token(s) shorter than 32 characters" in served.said
    assert "short-trainer" not in served.said
    assert "short-worker" not in served.said


def test_settings_come_from_the_environment_and_flags_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "rediss://user:pw@redis.example:6380/0")
    monkeypatch.setenv("ROLLOUT_MAX_TRAJECTORIES", "100")
    monkeypatch.setenv("ROLLOUT_TRAINER_TOKENS", "a, b")
    settings = Settings(max_trajectories=7)
    assert settings.redis_url == "rediss://user:pw@redis.example:6380/0"
    assert settings.max_trajectories == 7
    assert settings.trainer_token_list() == ["a", "b"]


def test_the_graceful_wait_comes_from_its_variable_and_is_a_second_at_least(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """0 would cut every request in flight at the signal (uvicorn's timeout of 0), a setting that reads
    as "no wait" or "off" and loses the requests a rolling restart is meant to let finish."""
    monkeypatch.setenv("ROLLOUT_GRACEFUL_SHUTDOWN_S", "3")
    assert Settings().graceful_shutdown_s == 3
    with pytest.raises(ValueError, match="graceful_shutdown_s"):
        Settings(graceful_shutdown_s=0)
    with pytest.raises(ValueError, match="graceful_shutdown_s"):
        Settings(graceful_shutdown_s=HOUR_S + 1)  # and an hour at most


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("default_policy", "bogus"),  # every request naming no policy would get a 422 blaming it
        ("default_model", "70b"),
        ("redis_url", "http://127.0.0.1:6379/0"),
        ("redis_url", "redis://127.0.0.1:99999/0"),
        ("redis_url", "redis://127.0.0.1:6379/abc"),  # was served on db 0
        ("retention_s", 10**17),  # past what EXPIRE takes: every publish failed, half-written
        ("lease_ttl_ms", 10**20),  # deadlines overflowed and the reaper failed on the schedule
        ("actuals_maxlen", 2**63),  # past what XADD MAXLEN takes: every POST /actuals was a 500
        ("redis_timeout_s", float("inf")),
        ("plan_queue_timeout_s", 1e12),
        ("model_dir", "/dev/null"),  # a file: the first retrain failed
        ("default_time_budget_ms", 60_001),  # over what a request may ask: planned past any stated budget
    ],
)
def test_a_setting_that_would_fail_later_is_refused_at_start(setting: str, value: object) -> None:
    options: dict[str, Any] = {"redis_url": None, setting: value}
    with pytest.raises(ValueError, match=setting):
        Settings(**options)


@pytest.mark.parametrize(
    ("host", "token", "refused"),
    [("127.0.0.1", None, False), ("::1", None, False), ("0.0.0.0", None, True), ("0.0.0.0", "t", False)],
)
def test_only_loopback_may_be_served_without_a_token(host: str, token: str | None, refused: bool) -> None:
    secret = SecretStr(token) if token else None
    settings = Settings(host=host, trainer_tokens=secret, redis_url="redis://127.0.0.1:1/0")
    assert (unsafe_binding(settings) is not None) == refused


def test_a_cluster_is_not_looked_for_in_the_embedded_single_node() -> None:
    assert "--redis-url" in (cluster_without_url(Settings(redis_cluster=True), {"redis_cluster"}) or "")
    assert cluster_without_url(Settings(redis_cluster=True, redis_url="redis://127.0.0.1:7000/0")) is None
    assert cluster_without_url(Settings()) is None


def test_serve_redis_cluster_without_a_url_exits_at_once_with_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("ROLLOUT_")}
    env["ROLLOUT_MODEL_DIR"] = str(tmp_path)
    command = [sys.executable, "-c", "from service.cli import main; main()", "serve", "--redis-cluster"]
    proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # it waited on the embedded server: its watcher ends that one
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 2
    assert err.strip().splitlines() == [
        "serve: --redis-cluster needs --redis-url (or REDIS_URL): the embedded server is a single node"
    ]


def test_serve_on_a_port_in_use_exits_at_once_with_one_line_before_starting_anything(tmp_path: Path) -> None:
    # it used to start the embedded Redis, log "Application startup complete", then exit 3
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("ROLLOUT_")}
    env["ROLLOUT_MODEL_DIR"] = str(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = [sys.executable, "-c", "from service.cli import main; main()", "serve", "--port", str(port)]
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"serve: 127.0.0.1:{port} is already in use (--port={port})"]


def test_a_network_address_is_not_served_on_the_embedded_redis_even_with_a_token() -> None:
    """Embedded: no password, this machine only, gone on exit; a networked service needs its own."""
    settings = Settings(host="0.0.0.0", trainer_tokens=SecretStr("t0ken"))
    assert "REDIS_URL" in (unsafe_binding(settings) or "")
    assert unsafe_binding(Settings(host="127.0.0.1")) is None


@pytest.mark.parametrize(
    ("trainer", "worker", "message"),
    [
        ("same,t1", "same", "in both"),
        ("t\u00e9st", None, "printable ASCII"),
    ],
)
def test_tokens_that_could_never_work_as_configured_are_refused_at_start(
    trainer: str, worker: str | None, message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        Settings(
            trainer_tokens=SecretStr(trainer.encode().decode("unicode_escape")),
            worker_tokens=SecretStr(worker) if worker else None,
        )


def test_the_benchmark_batches_have_the_issue_sizes() -> None:
    for trajectories, workers in ((1024, 16), (4096, 32)):
        body = batch(trajectories, workers, step=2, policy=None)
        assert sum(item["n"] for item in body["batch"]["items"]) == trajectories
        assert all(item["n"] == SAMPLES for item in body["batch"]["items"])
        assert len(body["inventory"]["workers"]) == workers


def test_every_setting_is_documented_in_the_readme() -> None:
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    names = ["REDIS_URL" if f == "redis_url" else f"ROLLOUT_{f.upper()}" for f in Settings.model_fields]
    assert [name for name in names if f"`{name}`" not in readme] == []


def test_a_rollout_variable_no_setting_reads_is_named_with_the_setting_it_resembles() -> None:
    environ = {
        "ROLLOUT_TRAINER_TOKEN": "t",  # the trainer side's name in docs/client.md, not the service's
        "ROLLOUT_DEFAULT_POLICIES": "lpt",
        "ROLLOUT_PORT": "8000",
        "ROLLOUT_ENGINE_API_KEY": "k",  # the sidecar's
        "REDIS_URL": "redis://r:6379/0",
    }
    assert unknown_variables(environ) == [
        "ROLLOUT_DEFAULT_POLICIES is not a setting and is ignored; did you mean ROLLOUT_DEFAULT_POLICY?",
        "ROLLOUT_TRAINER_TOKEN is not a setting and is ignored; did you mean ROLLOUT_TRAINER_TOKENS?",
    ]


def test_rollout_engine_is_named_as_the_default_engine_setting_not_the_sidecars_api_key() -> None:
    """``ROLLOUT_ENGINE=vllm-v0`` is what an operator of a V0 fleet may guess; by spelling alone it
    resembles the sidecar's ``ROLLOUT_ENGINE_API_KEY``, which would send them to set a secret."""
    assert unknown_variables({"ROLLOUT_ENGINE": "vllm-v0"}) == [
        "ROLLOUT_ENGINE is not a setting and is ignored; did you mean ROLLOUT_DEFAULT_ENGINE?"
    ]

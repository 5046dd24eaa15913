"""The compose loop, run for real without a container engine: every service of deploy/compose.yaml that
uses our image is started as a local process with the exact command and environment the file gives it,
only host names mapped to loopback ports; Redis is the same valkey-server with the file's flags and the
aclfile its ``redis-users`` one-shot writes, so the service and each sidecar log in as their own users.

The README's example batch is posted to the service and must finish: every trajectory done, each
result accepted once, by the compose workers. This is what ``docker compose up`` would
run, so a wrong flag, a sidecar pointing at the wrong engine or a password mismatch fails here.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import typer

from service.embedded import find_server_binary
from service.ports import free_port
from tests.deploy.aclfile_server import anonymous_ping
from tests.deploy.compose_redis import compose_services, redis_flags, write_aclfile
from tests.service.polling import poller

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_BATCH = ROOT / "deploy" / "example-batch.json"
CLI = (sys.executable, "-c", "from service.cli import main; main()")  # the console script, in this venv
TIME_SCALE = "0.1"  # engine-sim runs 10x faster than the modelled H100/910B; nothing else changes


class Loop:
    """Redis plus every service of our image as local processes, with compose host names remapped."""

    def __init__(self, workdir: Path, cli: typer.Typer) -> None:
        self.services = compose_services()
        self.cli = cli
        self.workdir = workdir
        self.ports = {name: free_port() for name in self.services}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self) -> None:
        """Write the aclfile (the one-shot), start Redis with it and the compose file's flags, then
        everything else at once."""
        aclfile = write_aclfile(self.cli, self.services, self.workdir)
        listen = ["--port", str(self.ports["redis"]), "--bind", "127.0.0.1", "--dir", str(self.workdir)]
        flags = [*redis_flags(self.services), "--aclfile", str(aclfile)]  # AOF, fsync, eviction, users
        self.procs["redis"] = subprocess.Popen(
            [find_server_binary(), *listen, *flags], stdout=subprocess.DEVNULL
        )
        for name, service in self.services.items():
            if name not in ("redis", "redis-users"):
                self.procs[name] = self._launch(name, service)

    def _remap(self, text: str) -> str:
        for name, port in self.ports.items():
            text = text.replace(f"//{name}:6379", f"//127.0.0.1:{port}")
            text = text.replace(f"http://{name}:8001", f"http://127.0.0.1:{port}")
        return text

    def _launch(self, name: str, service: dict[str, Any]) -> subprocess.Popen[bytes]:
        command = [self._remap(str(arg)) for arg in service["command"]]
        if "--port" in command:  # listeners: a free loopback port instead of the container's
            command[command.index("--port") + 1] = str(self.ports[name])
            command[command.index("--host") + 1] = "127.0.0.1"
        if "--health-port" in command:  # a sidecar's liveness endpoint: likewise
            command[command.index("--health-port") + 1] = str(self.ports[name])
        if command[0] == "engine-sim":
            command += ["--time-scale", TIME_SCALE]
        env = {k: self._remap(str(v)) for k, v in service.get("environment", {}).items()}
        env["ROLLOUT_MODEL_DIR"] = str(self.workdir / "models")  # the container path is not ours
        log = (self.workdir / f"{name}.log").open("wb")
        return subprocess.Popen(
            [*CLI, *command], env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT
        )

    def logs(self) -> str:
        """Tails of every log, for a failing assertion."""
        return "\n".join(f"--- {p.name}\n{p.read_text()[-800:]}" for p in sorted(self.workdir.glob("*.log")))

    def stop(self) -> None:
        """SIGTERM everything (sidecars drain), then wait."""
        for proc in self.procs.values():
            proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="module")
def loop(tmp_path_factory: pytest.TempPathFactory, cli: typer.Typer) -> Iterator[Loop]:
    """The running loop; torn down after the module."""
    running = Loop(tmp_path_factory.mktemp("compose-loop"), cli)
    running.start()
    try:
        yield running
    finally:
        running.stop()


def _wait_ready(base: str, loop: Loop, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    with poller(1.0) as client:  # not httpx.get per ask: ~34 ms of CPU each (tests.service.polling)
        while time.monotonic() < deadline:
            try:
                if client.get(f"{base}/readyz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
    raise AssertionError(f"service not ready\n{loop.logs()}")


def _sidecars(loop: Loop) -> list[dict[str, Any]]:
    return [svc for svc in loop.services.values() if svc["command"][0] == "sidecar"]


def _headers(loop: Loop) -> dict[str, str]:
    token = loop.services["scheduler"]["environment"]["ROLLOUT_TRAINER_TOKENS"]
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


@pytest.mark.slow
def test_the_example_batch_runs_to_completion_through_the_compose_loop(loop: Loop) -> None:
    base = f"http://127.0.0.1:{loop.ports['scheduler']}"
    _wait_ready(base, loop)
    with httpx.Client(base_url=base, headers=_headers(loop), timeout=60.0) as http:
        planned = http.post("/schedule", content=EXAMPLE_BATCH.read_bytes())
        assert planned.status_code == 200, planned.text
        schedule_id = planned.json()["schedule_id"]
        deadline, progress = time.monotonic() + 120.0, {}
        while time.monotonic() < deadline:
            progress = http.get(f"/schedule/{schedule_id}").json()
            if progress["done"] + progress["failed"] == progress["total"]:
                break
            time.sleep(0.5)
        results = http.get(f"/schedule/{schedule_id}/results", params={"count": 10_000}).json()["results"]
    batch = json.loads(EXAMPLE_BATCH.read_text())["batch"]["items"]
    assert progress["done"] == progress["total"] == sum(item["n"] for item in batch), loop.logs()
    accepted = Counter(result["key"] for result in results)
    print(f"\ncompose loop: total={progress['total']} done={progress['done']} results={len(results)}")
    assert len(accepted) == progress["total"]
    assert max(accepted.values()) == 1
    sidecars = {svc["command"][svc["command"].index("--worker-id") + 1] for svc in _sidecars(loop)}
    assert {result["worker_id"] for result in results} <= sidecars


def test_the_loop_redis_refuses_clients_without_the_password(loop: Loop) -> None:
    assert anonymous_ping(loop.ports["redis"]).startswith(b"-NOAUTH")
    password = loop.services["redis"]["environment"]["REDISCLI_AUTH"]  # the default user's
    with redis.Redis(port=loop.ports["redis"], password=password) as client:
        assert client.config_get("appendonly") == {"appendonly": "yes"}


def _redis_health_check(loop: Loop, password: str) -> int:
    """Run the compose file's Redis health check against the loop's Redis (its port, not 6379)."""
    test = loop.services["redis"]["healthcheck"]["test"]
    assert test[0] == "CMD-SHELL"
    cli = Path(find_server_binary()).with_name("valkey-cli")
    command = test[1].replace("valkey-cli", f"{cli} -p {loop.ports['redis']}", 1)
    env = {**os.environ, **loop.services["redis"]["environment"], "REDISCLI_AUTH": password}
    return subprocess.run(["sh", "-c", command], env=env, capture_output=True, timeout=10).returncode


def test_the_redis_health_check_passes_with_the_password_and_fails_without(loop: Loop) -> None:
    anonymous_ping(loop.ports["redis"])  # listening
    password = loop.services["redis"]["environment"]["REDISCLI_AUTH"]
    assert _redis_health_check(loop, password) == 0
    assert _redis_health_check(loop, "wrong-password") != 0


def _image_health_check(url: str) -> int:
    """Run the image's HEALTHCHECK script (deploy/healthcheck.py) for ``url``."""
    script = ROOT / "deploy" / "healthcheck.py"
    env = {**os.environ, "HEALTHCHECK_URL": url}
    return subprocess.run([sys.executable, str(script)], env=env, capture_output=True, timeout=15).returncode


def test_every_health_check_of_our_image_passes_on_the_running_loop_and_fails_on_a_dead_port(
    loop: Loop,
) -> None:
    _wait_ready(f"http://127.0.0.1:{loop.ports['scheduler']}", loop)
    checked = 0
    for name, service in loop.services.items():
        url = service.get("environment", {}).get("HEALTHCHECK_URL")
        if url is None:
            continue
        local = re.sub(r"//[^/]+/", f"//127.0.0.1:{loop.ports[name]}/", url)  # the process's own port
        deadline = time.monotonic() + 60
        while _image_health_check(local) != 0:
            assert time.monotonic() < deadline, f"{name}: {local} never healthy\n{loop.logs()}"
            time.sleep(0.5)
        checked += 1
    assert checked == 9  # the one-shot redis-users has no check: it has exited
    assert _image_health_check(f"http://127.0.0.1:{free_port()}/healthz") == 1

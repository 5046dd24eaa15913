"""The whole loop under the ACL users ``rollout-scheduler redis-acl`` prints, on a real valkey-server.

A server whose default user is off, the two users of the generated lines and an admin that reads
``ACL LOG``; the service (``create_app``) as the service user; a push sidecar and a pull sidecar, real
``rollout-scheduler sidecar`` processes, as the sidecar user. The loop: ``POST /schedule`` on three
workers, one with no sidecar (the other two steal its queue), the pull worker failing one item and
completing the rest, a second schedule cancelled while the push sidecar runs it, a third whose push
sidecar is killed mid-run and restarted (its successor hands the leases back and runs them), the
results read, actuals reported and a retrain, then both sidecars stopped. Whatever any of them sends
that the users lack is an ``ACL LOG`` entry.
"""

from __future__ import annotations

import shlex
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis
import typer
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from service.app import create_app
from service.delivery.acl import SERVICE, SIDECAR
from service.embedded import EmbeddedServer
from service.ports import free_port
from service.settings import Settings
from tests.cluster import LocalCluster
from tests.service.api_helpers import actual_history
from tests.service.sidecar.procs import Cluster, Proc, cluster, wait_http, wait_until

PASSWORDS = {SERVICE.password_env: "service-pw", SIDECAR.password_env: "sidecar-pw"}
ADMIN, ADMIN_PASSWORD = "acl-admin", "admin-pw"
LOOP_S = 120.0  # a bound against never on a loaded 2-core host, not a speed
# How often a wait reads the app's progress: each read is a whole request through the app (~4.5 ms of
# CPU in the test's process), so procs.wait_until's 20 ms made the waits a tenth of a core. What the
# loop acts on (a step running, then a kill or a cancel) lasts seconds, not 0.1 s.
READ_EVERY_S = 0.1


def generated_lines(cli: typer.Typer, *args: str) -> list[str]:
    """The ``ACL SETUSER`` lines ``rollout-scheduler redis-acl ARGS`` prints, passwords from the env."""
    result = CliRunner().invoke(cli, ["redis-acl", *args], env=PASSWORDS)
    assert result.exit_code == 0, result.output
    return [line for line in result.stdout.splitlines() if line.startswith("ACL SETUSER")]


@dataclass
class AclServer:
    """A server, or the nodes of a Redis Cluster, running the generated users; ``admins`` (one per
    node) may do anything: they read the log."""

    port: int  # the node the service and the sidecars are given
    admins: list[redis.Redis]
    cluster: bool = False

    @property
    def admin(self) -> redis.Redis:
        """The first node's admin client."""
        return self.admins[0]

    def url(self, user: str, password: str) -> str:
        """A ``redis://`` URL that logs in as ``user``."""
        return f"redis://{user}:{password}@127.0.0.1:{self.port}/0"

    def refusals(self) -> list[dict[str, Any]]:
        """What ``ACL LOG`` holds on every node: one entry per refused command, key or login."""
        return [entry for admin in self.admins for entry in admin.acl_log()]

    def keys(self) -> list[str]:
        """Every key on every node."""
        return [str(key) for admin in self.admins for key in admin.scan_iter(count=1000)]


def apply_lines(port: int, lines: list[str]) -> redis.Redis:
    """Run ``lines`` on the server at ``port`` as its default user, then empty its ACL LOG."""
    client = redis.Redis(host="127.0.0.1", port=port, decode_responses=True)
    for line in lines:
        client.execute_command(*shlex.split(line))  # type: ignore[no-untyped-call]  # redis-py untyped
    client.acl_log_reset()
    return client


@contextmanager
def acl_server(lines: list[str], *server_args: str) -> Iterator[AclServer]:
    """A fresh server (``server_args``: more of its flags) with ``lines`` applied, an admin user, its
    default user off and an empty ACL LOG."""
    admin_rules = ["reset", "on", f">{ADMIN_PASSWORD}", "~*", "&*", "+@all"]
    with EmbeddedServer(extra_args=server_args) as server:
        setup = apply_lines(server.port, [*lines, shlex.join(["ACL", "SETUSER", ADMIN, *admin_rules])])
        setup.acl_setuser("default", enabled=False)
        setup.close()
        admin = redis.Redis(
            host="127.0.0.1", port=server.port, username=ADMIN, password=ADMIN_PASSWORD, decode_responses=True
        )
        try:
            yield AclServer(server.port, [admin])
        finally:
            admin.close()


@contextmanager
def acl_cluster(lines: list[str]) -> Iterator[AclServer]:
    """A fresh 3-master Redis Cluster with ``lines`` applied on every node (an ACL is per node); the
    default user stays the admin, as the cluster's own tools log in with it."""
    nodes = LocalCluster().start()
    admins = [apply_lines(node.port, lines) for node in nodes.nodes]
    try:
        yield AclServer(nodes.nodes[0].port, admins, cluster=True)
    finally:
        for admin in admins:
            admin.close()
        nodes.stop()


@dataclass
class LoopOutcome:
    """What the loop did, so a test can say it ran what it claims to have run."""

    total: int = 0  # items of the first schedule
    done: int = 0  # of them accepted
    stolen: int = 0  # of them planned for the worker that has no sidecar: every one was stolen
    stats: dict[str, dict[str, int]] = field(default_factory=dict)  # worker -> its counters line
    cancelled: int = 0  # items the cancel ended
    retrained: str = ""  # the model version the retrain answered


def _body(workers: list[str], prompts: int, tokens: int, schedule_id: str) -> dict[str, Any]:
    """A /schedule body of ``prompts`` x 2 items of exactly ``tokens`` output tokens (``ignore_eos``)."""
    return {
        "schedule_id": schedule_id,
        "batch": {
            "items": [
                {
                    "prompt_id": f"p{i}",
                    "prompt_tokens": 50,
                    "n": 2,
                    "max_new_tokens": tokens,
                    "prompt": f"q {i}",
                }
                for i in range(prompts)
            ]
        },
        "inventory": {"workers": [{"worker_id": w, "device": "H100", "max_num_seqs": 4} for w in workers]},
        "policy": "lpt",
        "sampling": {"extra": {"ignore_eos": True}},
    }


def _pull_worker(port: int, stop: threading.Event) -> None:
    """A worker process on the pull API: fails its first item, completes every other one it gets. It
    asks as a worker does, long-polling (``wait_s``: the sidecar claims every 0.2 s meanwhile), not by
    a request every 50 ms."""
    base, failed = f"http://127.0.0.1:{port}", False
    with httpx.Client(base_url=base, timeout=10.0) as http:
        while not stop.is_set():
            reply = http.get("/next", params={"wait_s": 1.0})
            if reply.status_code != 200:
                continue
            lease = reply.json()
            body = {key: lease[key] for key in ("schedule_id", "key", "token")}
            if not failed:
                failed = http.post("/fail", json=body | {"reason": "oom"}).status_code == 200
            else:
                http.post("/done", json=body | {"output_tokens": 16})


def _progress(app: TestClient, schedule_id: str) -> dict[str, Any]:
    reply = app.get(f"/schedule/{schedule_id}")
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


@dataclass
class Sidecars:
    """How to start this loop's sidecars as the sidecar user: ``rollout-scheduler sidecar`` processes."""

    procs: Cluster
    url: str  # the sidecar user's
    prefix: str
    engine: str  # the push sidecar's engine-sim
    cluster: bool  # the server is a Redis Cluster

    def _args(self) -> list[str]:
        """Flags of both modes: heartbeats every 0.5 s, so the 30 s leases are renewed within the loop;
        an idle sidecar looks for work every 0.2 s (the sidecar's default): at 0.05 s the sidecars'
        idle claims cost ~0.4 CPU-s a loop, and sent no command 0.2 s does not (ci59c)."""
        polls = ["--idle-poll", "0.2", "--heartbeat-interval", "0.5", "--max-num-seqs", "4"]
        cluster = ["--cluster"] if self.cluster else []
        return ["--redis-url", self.url, "--prefix", self.prefix, *polls, *cluster]

    def push(self, name: str) -> Proc:
        """A push sidecar of ``w-push`` (``name``: its log's, one per process)."""
        return self.procs.spawn(
            name, ["sidecar", "--worker-id", "w-push", "--engine-url", self.engine, *self._args()]
        )

    def pull(self, port: int) -> Proc:
        """The pull sidecar of ``w-pull``, its API on ``port``."""
        return self.procs.spawn(
            "sidecar-w-pull", ["sidecar", "--worker-id", "w-pull", "--pull-api", str(port), *self._args()]
        )


def run_loop(acl: AclServer, prefix: str, workdir: Path) -> LoopOutcome:
    """Run the whole loop (module docstring) with the service and the sidecars as their users."""
    outcome = LoopOutcome()
    settings = Settings(
        redis_url=acl.url(SERVICE.default_user, PASSWORDS[SERVICE.password_env]),
        key_prefix=prefix,
        model_dir=str(workdir / "models"),
        redis_cluster=acl.cluster,
        lease_ttl_ms=30_000,  # past a killed sidecar's presence (5 s): its successor hands back
    )
    sidecar_url = acl.url(SIDECAR.default_user, PASSWORDS[SIDECAR.password_env])
    stop = threading.Event()
    with cluster(workdir) as procs, TestClient(create_app(settings), base_url="http://localhost") as app:
        engine = procs.engine_threads({"w-push": 1.0})["w-push"]
        sidecars = Sidecars(procs, sidecar_url, prefix, engine, acl.cluster)
        pull_port = free_port()
        push, pull = sidecars.push("sidecar-w-push"), sidecars.pull(pull_port)
        wait_http(f"http://127.0.0.1:{pull_port}/health", pull)
        worker = threading.Thread(target=_pull_worker, args=(pull_port, stop), daemon=True)
        worker.start()
        try:
            _serve_steps(app, outcome)
        finally:
            stop.set()
            worker.join(10)
        successor = _restart_mid_run(app, sidecars, push)
        _report_and_retrain(app, outcome)
        for proc in (successor, pull):
            proc.signal(signal.SIGTERM)
            outcome.stats[proc.name] = proc.stats(timeout_s=60)
    return outcome


def _restart_mid_run(app: TestClient, sidecars: Sidecars, push: Proc) -> Proc:
    """A step for the push worker alone, its sidecar SIGKILLed while it runs the step and started
    again: the successor hands back its predecessor's leases (``reset``) and runs them. Returned."""
    assert (
        app.post(
            "/schedule", json=_body(["w-push"], prompts=1, tokens=200, schedule_id="acl-step-2")
        ).status_code
        == 200
    )
    wait_until(
        lambda: _progress(app, "acl-step-2")["running"] > 0, LOOP_S, "the third step running", READ_EVERY_S
    )
    push.popen.kill()
    push.popen.wait(10)
    successor = sidecars.push("sidecar-w-push-2")
    wait_until(
        lambda: _progress(app, "acl-step-2")["done"] == 2,
        LOOP_S,
        "the third step run by the successor",
        READ_EVERY_S,
    )
    return successor


def _serve_steps(app: TestClient, outcome: LoopOutcome) -> None:
    """The trainer's side: a step run to the end (stolen from, one item failed once), a step cancelled
    while its leases run and heartbeat."""
    workers = ["w-push", "w-pull", "w-idle"]
    answer = app.post("/schedule", json=_body(workers, prompts=9, tokens=16, schedule_id="acl-step-0"))
    assert answer.status_code == 200, answer.text
    done = lambda: _progress(app, "acl-step-0")["done"] == 18  # noqa: E731
    wait_until(done, LOOP_S, "the first step's 18 items accepted", READ_EVERY_S)
    outcome.total, outcome.done = 18, _progress(app, "acl-step-0")["done"]
    outcome.stolen = len(answer.json()["assignments"].get("w-idle", []))
    long = _body(["w-push"], prompts=1, tokens=4000, schedule_id="acl-step-1")
    assert app.post("/schedule", json=long).status_code == 200
    wait_until(
        lambda: _progress(app, "acl-step-1")["running"] > 0, LOOP_S, "the long step running", READ_EVERY_S
    )
    time.sleep(1.5)  # a heartbeat or two of the running leases
    cancelled = app.delete("/schedule/acl-step-1")
    assert cancelled.status_code == 200, cancelled.text
    wait_until(
        lambda: _progress(app, "acl-step-1")["running"] == 0,
        LOOP_S,
        "the cancelled leases ended",
        READ_EVERY_S,
    )
    outcome.cancelled = _progress(app, "acl-step-1")["cancelled"]


def _report_and_retrain(app: TestClient, outcome: LoopOutcome) -> None:
    """The trainer reads a step's results, reports actuals (a history the retrain can fit) and retrains."""
    assert app.get("/readyz").status_code == 200  # the probe's PING
    results = app.get("/schedule/acl-step-0/results")
    assert results.status_code == 200, results.text
    reports = [{**report, "schedule_id": "acl-step-0"} for report in actual_history(steps=2)]
    assert app.post("/actuals", json={"actuals": reports}).status_code == 200
    retrained = app.post("/models/retrain")
    assert retrained.status_code == 200, retrained.text
    outcome.retrained = str(retrained.json().get("version", ""))

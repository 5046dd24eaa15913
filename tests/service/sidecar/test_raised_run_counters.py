"""A sidecar run that raised prints the counters line too, with what it had counted and its ``error``,
and exits with the status it always had (70 for a loop's death, 2 for a refusal).

An operator reading a fleet's logs greps the counters line (docs/sidecar.md); a run that raised printed
only its one line on stderr, so the sidecar that died after finishing half its items showed nothing
there, and what it had accepted, failed or handed back was told nowhere (signals46 left it: the run
returned no counters when it raised). The run now counts into the command's own ``SessionStats``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from typer.testing import CliRunner

from service.delivery.protocol import Delivery
from service.ports import free_port
from service.redis_conn import RedisRefusedError, RedisTooOldError
from service.sidecar import launch
from service.sidecar.launch import CannotListenError
from service.sidecar.supervision import LoopDiedError
from tests.service.sidecar.command_run import ARGS, balanced, caller_app, counted_then_raising
from tests.service.sidecar.procs import ROOT, Cluster, Proc, bound_url, cluster, item, publish, wait_http

RAISED: dict[str, tuple[BaseException, int, str]] = {  # what the run raised: its status and line
    "loop-died": (
        LoopDiedError("heartbeat loop", ZeroDivisionError("division by zero")),
        70,
        "the sidecar's heartbeat loop died (ZeroDivisionError: division by zero)",
    ),
    "refused": (
        RedisRefusedError("Redis at r refused our credentials"),
        2,
        "Redis at r refused our credentials",
    ),
    "too-old": (RedisTooOldError("Redis at r is 6.0"), 2, "Redis at r is 6.0"),
    "port-taken": (
        CannotListenError(98, "Address already in use"),  # a bind's OSError (``launch._binding``)
        2,
        "cannot listen: [Errno 98] Address already in use",
    ),
}


@pytest.mark.parametrize("mode", ["push", "pull"])
@pytest.mark.parametrize("name", RAISED)
def test_a_run_that_raised_prints_its_counters_and_error_and_keeps_its_status(
    name: str, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    error, status, reason = RAISED[name]
    monkeypatch.setattr(launch, f"run_{mode}", counted_then_raising(error))
    args = [*ARGS[:-2], "--pull-api", str(free_port())] if mode == "pull" else ARGS
    result = CliRunner().invoke(caller_app(), args)
    assert result.exit_code == status
    assert result.stderr.strip() == f"sidecar: {reason}"
    (line,) = result.stdout.splitlines()
    counters = json.loads(line)
    assert counters == {**counters, "worker_id": "w", "claimed": 3, "accepted": 2, "released": 1}
    assert list(counters)[-1] == "error"
    assert counters["error"] == reason


# ``rollout-scheduler sidecar`` whose heartbeat loop dies of a bug once ``DIE_AFTER`` items were
# accepted: a real run (real Redis, a real engine or the test as the pull worker) that raises
DYING_CHILD = """
import os
from service.sidecar.session import WorkerSession

beat_every = WorkerSession.heartbeat_interval

def dies_once_accepted(self):
    if self.stats.accepted >= int(os.environ["DIE_AFTER"]):
        raise ZeroDivisionError("a bug in the heartbeat loop")
    return beat_every(self)

WorkerSession.heartbeat_interval = dies_once_accepted
from service.cli import main
main()
"""


def _dying_sidecar(procs: Cluster, args: list[str], die_after: int) -> Proc:
    """``DYING_CHILD`` run with ``args`` (after ``sidecar --worker-id w0``, heartbeats every 0.1 s)."""
    log = procs.workdir / "sidecar-w0.log"
    argv = ["sidecar", "--worker-id", "w0", "--heartbeat-interval", "0.1", "--drain-timeout", "1", *args]
    popen = subprocess.Popen(
        [sys.executable, "-c", DYING_CHILD, *argv],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "DIE_AFTER": str(die_after)},
    )
    sidecar = Proc("sidecar-w0", popen, log)
    procs.procs.append(sidecar)
    return sidecar


def _exit_and_counters(sidecar: Proc) -> tuple[int, dict[str, Any]]:
    """The exit status of ``sidecar`` and its counters line, read once it exited."""
    counters = sidecar.stats(timeout_s=120.0)
    return sidecar.popen.wait(timeout=30), counters


def test_a_push_sidecar_whose_heartbeat_loop_died_prints_what_it_had_counted(
    redis_client: redis.Redis, redis_url: str, engine_url: str, tmp_path: Path
) -> None:
    publish(
        Delivery(redis_client), "s", {"w0": [item(f"p{i}", 0, 10) for i in range(6)]}, lease_ttl_ms=60_000
    )
    with cluster(tmp_path) as procs:
        sidecar = _dying_sidecar(procs, ["--engine-url", engine_url, "--redis-url", redis_url], 2)
        status, counters = _exit_and_counters(sidecar)
    assert status == 70, sidecar.log.read_text()[-2000:]
    assert counters["worker_id"] == "w0"
    assert counters["accepted"] >= 2
    assert balanced(counters), counters
    assert counters["error"].startswith("the sidecar's heartbeat loop died (ZeroDivisionError")


def test_a_pull_sidecar_whose_heartbeat_loop_died_prints_what_it_had_counted(
    redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    publish(Delivery(redis_client), "s", {"w0": [item("a", 0, 10), item("b", 0, 10)]}, lease_ttl_ms=60_000)
    with cluster(tmp_path) as procs:
        sidecar = _dying_sidecar(procs, ["--redis-url", redis_url, "--pull-api", "0"], 1)
        base = bound_url(sidecar)  # the kernel's pick
        wait_http(f"{base}/ready", sidecar)
        with httpx.Client(base_url=base, timeout=30.0) as worker:
            lease = worker.get("/next", params={"wait_s": 10}).json()
            body = {key: lease[key] for key in ("schedule_id", "key", "token")}
            assert worker.post("/done", json={**body, "output_tokens": 10}).status_code == 200
        status, counters = _exit_and_counters(sidecar)
    assert status == 70, sidecar.log.read_text()[-2000:]
    assert (counters["claimed"], counters["accepted"]) == (1, 1)
    assert balanced(counters), counters
    assert counters["error"].startswith("the sidecar's heartbeat loop died (ZeroDivisionError")

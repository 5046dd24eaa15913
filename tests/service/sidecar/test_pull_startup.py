"""A pull-mode sidecar serves its API before it reaches Redis: ``/health`` answers ``connecting``
while a Redis Cluster down at start-up is waited for, ``/ready`` and ``/next`` answer 503, and it
turns ready once the cluster answers.

It used to wait for the cluster before its API existed: a liveness probe on ``/health`` failed for
the whole outage (a restart loop for an outage a restart cannot fix), and the worker process's
``/next`` could not tell a sidecar still connecting from one that is gone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import httpx
import pytest

from service.embedded import EmbeddedServer
from service.ports import free_port
from tests.cluster import one_node_cluster
from tests.service.bound_port import child_port
from tests.service.polling import until_status
from tests.service.sidecar.procs import PROCESS_START_S


def _sidecar(redis_url: str, cluster: bool = True) -> subprocess.Popen[str]:
    """A pull sidecar on a port the kernel picks (``_base`` finds it): nothing to race for."""
    command = [sys.executable, "-c", "from service.cli import main; main()", "sidecar", "--worker-id", "w0"]
    command += ["--pull-api", "0", "--redis-url", redis_url, *(["--cluster"] if cluster else [])]
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("ROLLOUT_")}
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _base(proc: subprocess.Popen[str]) -> str:
    """The pull API's URL, once the sidecar listens (``tests.service.bound_port``): after its imports,
    which took a minute at load ~30 on 2 cores, so ``PROCESS_START_S`` bounds them (against never),
    and the bounds after it time the sidecar's answers, not its start."""
    return f"http://127.0.0.1:{child_port(proc, PROCESS_START_S)}"


def _stop(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    proc.send_signal(signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out, err


@pytest.mark.timeout(PROCESS_START_S + 90)  # the start, then the test's own waits
def test_pull_mode_answers_health_while_its_cluster_is_down_and_turns_ready_once_it_answers(
    held_redis_port: int,
) -> None:
    redis_port = held_redis_port  # for the cluster started below: no other server takes it first
    proc = _sidecar(f"redis://127.0.0.1:{redis_port}/0")
    node = None
    try:
        base = _base(proc)
        health = until_status(f"{base}/health", 200, proc, timeout_s=30)  # no cluster at all yet
        assert health.json() == {"status": "connecting", "worker_id": "w0", "held": 0, "waiting": 0}
        assert httpx.get(f"{base}/ready", timeout=2.0).status_code == 503
        waiting = httpx.get(f"{base}/next", timeout=2.0)
        assert waiting.status_code == 503
        assert waiting.json() == {"error": "connecting to Redis"}
        node = one_node_cluster(redis_port)
        until_status(f"{base}/ready", 200, proc, timeout_s=30)  # the sidecar retries every 2 s
        assert httpx.get(f"{base}/health", timeout=2.0).json()["status"] == "ok"
        assert httpx.get(f"{base}/next", timeout=2.0).status_code == 204  # nothing published
        code, out, _ = _stop(proc)
        assert code == 0
        assert json.loads(out.strip().splitlines()[-1])["worker_id"] == "w0"
    finally:
        if proc.poll() is None:
            _stop(proc)
        if node is not None:
            node.stop()


@pytest.mark.timeout(PROCESS_START_S + 90)  # the start, then the test's own waits
def test_pull_mode_on_a_plain_redis_down_at_start_up_is_not_ready_until_it_answers(
    held_redis_port: int,
) -> None:
    """Against a plain Redis (no cluster) down at start-up, ``/ready`` answered 200 at once, while
    every ``/next`` answered 503 "redis unavailable": ready meant nothing."""
    redis_port = held_redis_port  # for the server started below: no other server takes it first
    proc = _sidecar(f"redis://127.0.0.1:{redis_port}/0", cluster=False)
    server = None
    try:
        base = _base(proc)
        health = until_status(f"{base}/health", 200, proc, timeout_s=30)
        assert health.json() == {"status": "connecting", "worker_id": "w0", "held": 0, "waiting": 0}
        assert httpx.get(f"{base}/ready", timeout=2.0).status_code == 503
        assert httpx.get(f"{base}/next", timeout=2.0).json() == {"error": "connecting to Redis"}
        server = EmbeddedServer(port=redis_port).start()
        until_status(f"{base}/ready", 200, proc, timeout_s=30)  # the sidecar retries every 2 s
        assert httpx.get(f"{base}/next", timeout=2.0).status_code == 204  # nothing published
        code, _, err = _stop(proc)
        assert code == 0
        assert f"Redis at redis://127.0.0.1:{redis_port}/0 unreachable" in err  # one line every 2 s
    finally:
        if proc.poll() is None:
            _stop(proc)
        if server is not None:
            server.stop()


@pytest.mark.timeout(PROCESS_START_S + 90)  # the start, then the test's own waits
def test_pull_mode_stops_at_once_on_sigterm_while_still_waiting_for_its_cluster(held_redis_port: int) -> None:
    proc = _sidecar(f"redis://127.0.0.1:{held_redis_port}/0")  # nothing answers there until the test ends
    try:
        until_status(f"{_base(proc)}/health", 200, proc, timeout_s=30)
        code, out, _ = _stop(proc)  # fails unless it exits within 20 s of the SIGTERM
    finally:  # a start that failed its bound is stopped too, not left running past the test
        if proc.poll() is None:
            _stop(proc)
    assert code == 0  # a clean exit, not _stop's kill; no wall-clock figure: at load 38 the
    # interpreter's own teardown on a starved CPU ran 7 s past the drain (helper timedtests)
    assert json.loads(out.strip().splitlines()[-1])["claimed"] == 0


@pytest.mark.timeout(PROCESS_START_S + 90)  # the start, then the test's own waits
def test_pull_mode_whose_cluster_refuses_its_password_exits_with_one_line() -> None:
    """Waiting cannot fix credentials: the sidecar stops serving and says so, as in push mode."""
    redis_port = free_port()
    node = one_node_cluster(redis_port, password="s3cret")
    try:
        proc = _sidecar(f"redis://:wrong@127.0.0.1:{redis_port}/0")
        try:
            # its start and the refusal: a bound against never (not ``_base``: it may exit before a look)
            _, err = proc.communicate(timeout=PROCESS_START_S)
        finally:  # one that never exits is killed and reaped, not left to outlive the test
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 2
        assert "refused our credentials" in err.strip().splitlines()[-1]
        assert "wrong" not in err
    finally:
        node.stop()

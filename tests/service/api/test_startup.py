"""``serve`` answers liveness while its Redis Cluster is down, and turns ready once the cluster answers.

A cluster client cannot be built before a node answers with the slot map. ``serve`` used to wait for
that before uvicorn started, so ``/healthz`` went unanswered for the whole outage: a cluster down at
pod start outlived the startup probe and the pod was restarted in a loop. Now the app serves at once,
not ready, and builds its context in the background (``service.startup``).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.ports import free_port
from service.settings import Settings
from tests.cluster import one_node_cluster
from tests.service.api_helpers import batch_body
from tests.service.bound_port import child_port
from tests.service.polling import until_status


def test_serve_answers_liveness_while_its_cluster_is_down_and_turns_ready_once_it_answers(
    tmp_path: Path, held_redis_port: int
) -> None:
    redis_port = held_redis_port  # for the cluster started below: no other server takes it first
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("ROLLOUT_")}
    env |= {"ROLLOUT_MODEL_DIR": str(tmp_path), "ROLLOUT_REDIS_TIMEOUT_S": "0.2"}
    command = [sys.executable, "-c", "from service.cli import main; main()", "serve", "--port", "0"]
    command += ["--redis-url", f"redis://127.0.0.1:{redis_port}/0", "--redis-cluster"]
    proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    node = None
    try:
        # the kernel's pick, which no one can take first (bound_port.py), within 60 s of its own: the
        # time serve's imports wait for a CPU on a loaded host is not counted (30 s wall ran out at load 20)
        port = child_port(proc, 60)
        until_status(f"http://127.0.0.1:{port}/healthz", 200, proc, timeout_s=30)  # no cluster at all yet
        waiting = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2.0)
        assert waiting.status_code == 503
        assert waiting.json()["redis"].startswith("unreachable")
        node = one_node_cluster(redis_port)
        until_status(f"http://127.0.0.1:{port}/readyz", 200, proc, timeout_s=30)  # retried every 2 s
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if node is not None:
            node.stop()


def test_while_the_cluster_is_down_redis_bound_routes_answer_503_and_probes_answer(
    tmp_path: Path, held_redis_port: int
) -> None:
    settings = Settings(
        redis_url=f"redis://127.0.0.1:{held_redis_port}/0",  # nothing answers there until the test ends
        redis_cluster=True,
        redis_timeout_s=0.2,
        model_dir=str(tmp_path),
    )
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/metrics").status_code == 200
        planned = client.post("/schedule", json=batch_body())
        assert planned.status_code == 503
        assert planned.headers["content-type"] == "application/problem+json"
        assert "starting: Redis unreachable" in planned.json()["detail"]
        assert client.get("/models").status_code == 503


def test_a_cluster_that_refuses_the_password_keeps_serve_not_ready_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Waiting alone cannot fix credentials: an error log line, and /readyz names the refusal."""
    port = free_port()
    node = one_node_cluster(port, password="s3cret")
    try:
        url = f"redis://:wrong@127.0.0.1:{port}/0"
        settings = Settings(redis_url=url, redis_cluster=True, model_dir=str(tmp_path))
        with caplog.at_level(logging.ERROR, logger="service.app"), TestClient(create_app(settings)) as client:
            ready = client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["redis"].startswith("refused")
        assert "wrong" not in ready.text
        assert "refused the service's user" in caplog.text
    finally:
        node.stop()

"""Service replicas as real processes: ``rollout-scheduler serve`` subprocesses on loopback ports.

Two replicas share nothing but Redis, exactly as two pods of the Deployment do, so a test that drives
them proves the scale-out claim rather than the behaviour of one process with two names.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from service.ports import free_port
from tests.service.polling import poller

TRAINER_TOKEN = "replica-trainer-token"
WORKER_TOKEN = "replica-worker-token"
SERVE = (sys.executable, "-c", "from service.cli import main; main()", "serve")
# A bound against never, not a speed: a start is ~2.5 CPU-s of imports and loading, and two replicas
# start at once; at a load of ~20 on 2 cores (other suites beside this one) 60 s was once not enough.
READY_S = 120.0


@dataclass
class Replica:
    """One ``serve`` process; ``start`` waits until ``/readyz`` says it can take schedules."""

    name: str  # label in assertion messages
    redis_url: str  # the Redis every replica shares
    model_dir: Path  # the model store (shared by the replicas, as the k8s volume claim is)
    cluster: bool = False  # the URL names a Redis Cluster node (serve --redis-cluster)
    port: int = field(default_factory=free_port)
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def url(self) -> str:
        """Base URL of this replica."""
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = READY_S) -> Replica:
        """Launch the process and block until it is ready; raise with its log tail if it is not."""
        return self.launch().wait_ready(timeout_s)

    def launch(self) -> Replica:
        """Launch the process without waiting (start several, then wait for each)."""
        env = {
            **os.environ,
            "ROLLOUT_TRAINER_TOKENS": TRAINER_TOKEN,
            "ROLLOUT_WORKER_TOKENS": WORKER_TOKEN,
            "ROLLOUT_LOG_LEVEL": "WARNING",
        }
        args = [*SERVE, "--host", "127.0.0.1", "--port", str(self.port), "--redis-url", self.redis_url]
        args += ["--model-dir", str(self.model_dir), *(["--redis-cluster"] if self.cluster else [])]
        self._proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        return self

    def wait_ready(self, timeout_s: float = READY_S) -> Replica:
        """Block until ``/readyz`` answers 200 (Redis reachable, predictor loaded)."""
        proc = self._proc
        assert proc is not None, "launch() first"
        deadline, said = time.monotonic() + timeout_s, "not asked"
        with poller(1.0) as client:  # not httpx.get per ask: ~34 ms of CPU each (tests.service.polling)
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    raise RuntimeError(f"{self.name} exited: {_stderr(proc)}")
                try:
                    last = client.get(f"{self.url}/readyz")
                    if last.status_code == 200:
                        return self
                    said = f"/readyz {last.status_code}: {last.text[:300]}"
                except httpx.TransportError as error:
                    said = f"/readyz unanswered: {error!r}"
                time.sleep(0.1)
        self.stop()  # stopped first: its stderr is read to the end once it has exited
        raise RuntimeError(f"{self.name} not ready in {timeout_s}s ({said}); its stderr: {_stderr(proc)}")

    @property
    def alive(self) -> bool:
        """Whether the process is still running."""
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> None:
        """SIGTERM (graceful shutdown, as Kubernetes does), then SIGKILL if it lingers."""
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def client(self) -> httpx.Client:
        """An HTTP client with the trainer token (planning takes a while on 2 shared cores)."""
        headers = {"Authorization": f"Bearer {TRAINER_TOKEN}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60.0)


def _stderr(proc: subprocess.Popen[bytes]) -> str:
    """The tail of an exited process's stderr ("" while it runs: a read would wait for its end)."""
    if proc.stderr is None or proc.poll() is None:
        return ""
    return proc.stderr.read().decode(errors="replace")[-2000:]

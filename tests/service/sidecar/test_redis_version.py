"""A sidecar against a Redis older than the service runs on stops at start, in one line naming the
version found and the one needed, as the service refuses it (``redis-too-old``).

It used to start against any version: on a server without the commands its scripts use (LPOP with a
count, SET ... GET), each claim failed and the runner took that for an outage, logging "redis
unavailable" once and never claiming; on one new enough for the scripts but not for the service, it
ran beside a service that refused every request. An old server is the real one against a minimum
raised above it, in the sidecar's own process (nothing of Redis is mocked).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import redis

from service.embedded import EmbeddedServer
from service.ports import free_port

RAISED = "Redis 99.0 or later, or Valkey"  # what the sidecar below is told the minimum is
RAISE_MINIMUM = "from service import redis_conn; redis_conn.MIN_REDIS_VERSION = (99, 0)"


def _sidecar(redis_url: str, *mode: str) -> subprocess.Popen[str]:
    code = f"{RAISE_MINIMUM}; from service.cli import main; main()"
    command = [sys.executable, "-c", code, "sidecar", "--worker-id", "w0", "--redis-url", redis_url, *mode]
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("ROLLOUT_")}
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _ended(proc: subprocess.Popen[str], within_s: float) -> tuple[int, str, str]:
    """The exit code and output of ``proc`` once it ends by itself; stopped (SIGTERM) and failed
    when it is still running after ``within_s``: a sidecar that does not check serves until told."""
    try:
        out, err = proc.communicate(timeout=within_s)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        pytest.fail(f"the sidecar did not stop by itself; it ran until SIGTERM: {err[-2000:]}")
    return proc.returncode, out, err


@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", ["push", "pull"])
def test_a_sidecar_against_a_redis_too_old_exits_at_start_with_one_line(
    redis_url: str, redis_client: redis.Redis, mode: str
) -> None:
    flags = (
        ["--engine-url", f"http://127.0.0.1:{free_port()}"]
        if mode == "push"
        else ["--pull-api", str(free_port())]
    )
    version = redis_client.info("server")["redis_version"]
    code, out, err = _ended(_sidecar(redis_url, *flags), within_s=30)
    assert code == 2
    assert out == ""  # no counters: it never served
    refusal = f"sidecar: Redis {version} at {redis_url} is too old: the service needs {RAISED}"
    assert err.strip().splitlines()[-1] == refusal
    assert redis_client.keys("*") == []  # it wrote nothing (no presence key, no claim)


@pytest.mark.timeout(90)
def test_a_push_sidecar_whose_redis_was_down_at_start_asks_its_version_before_claiming() -> None:
    """A plain Redis down at start-up cannot be asked then: the sidecar waits for it, and exits in
    one line once it answers with a version too old, having claimed and written nothing."""
    redis_port = free_port()
    url = f"redis://127.0.0.1:{redis_port}/0"
    proc = _sidecar(url, "--engine-url", f"http://127.0.0.1:{free_port()}")
    try:
        time.sleep(3)  # the sidecar is past its start-up ping, which failed
        assert proc.poll() is None
        with EmbeddedServer(port=redis_port) as server:
            code, out, err = _ended(proc, within_s=30)
            client = redis.Redis.from_url(server.url, decode_responses=True)
            assert client.keys("*") == []
            version = client.info("server")["redis_version"]
            client.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 2
    assert out == ""
    refusal = f"sidecar: Redis {version} at {url} is too old: the service needs {RAISED}"
    assert err.strip().splitlines()[-1] == refusal

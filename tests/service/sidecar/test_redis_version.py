"""A sidecar against a Redis older than the service runs on stops at start, in one line naming the
version found and the one needed, as the service refuses it (``redis-too-old``).

It used to start against any version: on a server without the commands its scripts use (LPOP with a
count, SET ... GET), each claim failed and the runner took that for an outage, logging "redis
unavailable" once and never claiming; on one new enough for the scripts but not for the service, it
ran beside a service that refused every request. An old server is the real one against a minimum
raised above it, in the sidecar's own process (nothing of Redis is mocked).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import httpx
import pytest
import redis

from service import redis_conn
from service.delivery.keys import sidecar_presence
from service.delivery.protocol import Delivery
from service.embedded import EmbeddedServer
from service.ports import free_port
from service.redis_conn import RedisTooOldError, VersionCheck
from service.sidecar.engine_client import EngineClient, EngineOptions
from service.sidecar.holdings import Holdings
from service.sidecar.runner import RunnerSettings, Sidecar
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.procs import claimed_by_a_killed_sidecar, item, publish

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


def _counted_nothing(out: str, refusal: str) -> bool:
    """Whether ``out`` is one counters line, every counter 0, its ``error`` the refusal's line (the
    counters line a run that raised prints, round 47: it never served, so it counted nothing)."""
    (line,) = out.splitlines()
    counters = json.loads(line)
    error = counters.pop("error")
    del counters["worker_id"]
    return bool(f"sidecar: {error}" == refusal and not any(counters.values()))


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
    refusal = f"sidecar: Redis {version} at {redis_url} is too old: the service needs {RAISED}"
    assert _counted_nothing(out, refusal)
    assert err.strip().splitlines()[-1] == refusal
    assert redis_client.keys("*") == []  # it wrote nothing (no presence key, no claim)


@pytest.mark.timeout(90)
def test_a_push_sidecar_whose_redis_was_down_at_start_asks_its_version_before_claiming(
    held_redis_port: int,
) -> None:
    """A plain Redis down at start-up cannot be asked then: the sidecar waits for it, and exits in
    one line once it answers with a version too old, having claimed and written nothing."""
    redis_port = held_redis_port  # for the server started below: no other server takes it first
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
    refusal = f"sidecar: Redis {version} at {url} is too old: the service needs {RAISED}"
    assert _counted_nothing(out, refusal)
    assert err.strip().splitlines()[-1] == refusal


@dataclass
class LateVersion(VersionCheck):
    """The version check of a Redis that was down at start, whose INFO is answered only once
    ``answer`` is set: the other calls of a sidecar that reach the server meanwhile are the ones
    that, in a real start, race that check (and won it in 1 of 14 runs of the test above)."""

    answer: threading.Event = field(default_factory=threading.Event)
    asked: list[int] = field(default_factory=list)  # a thread id per call that waits for the answer

    def check(self) -> str | None:
        """The real check, once ``answer`` is set."""
        self.asked.append(threading.get_ident())  # one append: no count lost between threads
        self.answer.wait(30)
        return super().check()


def _engine(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"data": [{"id": "m", "max_model_len": 32768}]})


def _snapshot(client: redis.Redis) -> dict[str, object]:
    return {str(key): client.dump(key) for key in client.keys("*")}


@pytest.mark.timeout(60)
def test_a_push_sidecar_writes_nothing_to_a_redis_whose_version_it_has_not_yet_passed(
    redis_url: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No presence key and no hand-back of a predecessor's leases before the version check answers:
    the takeover used to run beside it, and when the server turned out too old its presence key
    stayed until it lapsed (the sidecar refused the server, so never deleted it)."""
    monkeypatch.setattr(redis_conn, "MIN_REDIS_VERSION", (99, 0))
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "s", {"w0": [item("p0", 0, 10), item("p1", 0, 10)]}, lease_ttl_ms=60_000)
    claimed_by_a_killed_sidecar(delivery, "s", "w0", 1)  # the takeover would hand it back, if it ran
    before = _snapshot(redis_client)
    version = LateVersion(delivery.client, redis_url)
    http = httpx.AsyncClient(transport=httpx.MockTransport(_engine), base_url="http://engine")
    engine = EngineClient(EngineOptions("http://engine"), http)
    session = WorkerSession(delivery, Holdings(8), SessionSettings("w0"))
    settings = RunnerSettings(idle_poll_s=0.02, redis_retry_s=0.05)
    sidecar = Sidecar(session, engine, settings, version=version)
    presence = sidecar_presence("w0")

    async def main() -> None:
        run = asyncio.create_task(sidecar.run(asyncio.Event()))
        deadline = time.monotonic() + 10  # until a write lands, or the loop and the takeover both ask
        while not redis_client.exists(presence) and len(version.asked) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        version.answer.set()
        with pytest.raises(RedisTooOldError):
            await run

    asyncio.run(main())
    assert not redis_client.exists(presence)
    assert delivery.progress("s").running == 1  # the predecessor's lease is not handed back
    assert _snapshot(redis_client) == before  # nor anything else written

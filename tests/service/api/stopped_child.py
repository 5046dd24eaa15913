"""A ``serve`` child process stopped by SIGTERM while its Redis's writes are paused: the shutdown
tests' one way to run it (``test_shutdown_plan``, ``test_shutdown_stalled``, ``test_exit_guard``,
``test_shutdown_answer``, ``test_stop_after_publish_check``), so that each states only what it
holds behind the pause (or in its stuck call) and what the exit must show.

The child gets the parent's environment less ``REDIS_URL`` and every ``ROLLOUT_*`` (a developer's
shell must not change what the test runs), its command timeout, a model dir of the test's own, and a
graceful wait of ``CUT_AFTER_S``: these tests state what the stop does once uvicorn has cut the
requests in flight, not how long it waited first, and each waited out the default 10 s whole
(ci54). A test of what happens during the wait gives ``graceful_s=None``: the default's.
A child still running when the test fails is killed, so no ``serve`` outlives its test.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from tests.service.bound_port import child_port
from tests.service.polling import until_status

ROOT = Path(__file__).resolve().parents[3]
CUT_AFTER_S = 1  # ROLLOUT_GRACEFUL_SHUTDOWN_S where the wait's length is not what a test states


@contextmanager
def serving(
    module: str,
    redis_url: str,
    model_dir: Path,
    timeout_s: float,
    wait_s: float,
    graceful_s: int | None = CUT_AFTER_S,
    **env: str,
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``python -m module serve`` on ``redis_url`` with the command timeout ``timeout_s``, the graceful
    wait ``graceful_s`` (None: the default) and ``env`` added, once its ``/readyz`` answers 200 (within
    ``wait_s``): the process and its base URL."""
    child_env = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("ROLLOUT_")}
    child_env.update(
        ROLLOUT_REDIS_TIMEOUT_S=str(timeout_s), ROLLOUT_MODEL_DIR=str(model_dir), PYTHONPATH=str(ROOT), **env
    )
    if graceful_s is not None:
        child_env["ROLLOUT_GRACEFUL_SHUTDOWN_S"] = str(graceful_s)
    command = [sys.executable, "-m", module, "serve", "--redis-url", redis_url, "--port", "0"]
    proc = subprocess.Popen(
        command, cwd=ROOT, env=child_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        url = f"http://127.0.0.1:{child_port(proc, wait_s)}"  # the kernel's pick (bound_port.py)
        until_status(f"{url}/readyz", 200, proc, wait_s)
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def stopped_under_pause(proc: subprocess.Popen[str], client: redis.Redis, wait_s: float) -> tuple[str, bool]:
    """SIGTERM to ``proc``, then its exit (within ``wait_s``, status 0: checked here): its stderr, and
    whether ``client``'s server still had writes paused once it had exited."""
    proc.send_signal(signal.SIGTERM)
    _, logged = proc.communicate(timeout=wait_s)
    paused = client.info("clients")["paused_reason"] == "client_pause"
    assert proc.returncode == 0, logged
    return logged, paused


def closed(url: str, wait_s: float) -> None:
    """Until ``url``'s listener refuses a connection (uvicorn's shutdown has begun), within ``wait_s``."""
    host, port = url.removeprefix("http://").split(":")
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, int(port)), timeout=1.0).close()
        except ConnectionRefusedError:
            return
        time.sleep(0.01)
    raise AssertionError(f"{url} still accepts connections")


def began(marker: Path, proc: subprocess.Popen[str], wait_s: float) -> None:
    """Until the child's planted step has begun (it writes ``marker``), within ``wait_s``; fails if
    the child ends first."""
    deadline = time.monotonic() + wait_s
    while not marker.exists():
        assert time.monotonic() < deadline, f"{marker.name}: never began"
        assert proc.poll() is None, "serve ended before its planted step began"
        time.sleep(0.01)


def stopped_while_posting(
    module: str,
    redis_url: str,
    model_dir: Path,
    marker: Path,
    post: Callable[[str], None],
    wait_s: float,
    **env: str,
) -> tuple[subprocess.Popen[str], str]:
    """``serving(module, ...)`` at a 1 s command timeout and a graceful wait of ``CUT_AFTER_S``;
    ``post(url)`` in a thread, and SIGTERM once the planted step has begun (``marker``): the ended
    process and its stderr, the poster joined."""
    with serving(module, redis_url, model_dir, 1, wait_s, CUT_AFTER_S, **env) as (proc, url):
        poster = threading.Thread(target=post, args=(url,), daemon=True)
        poster.start()
        began(marker, proc, wait_s)
        proc.send_signal(signal.SIGTERM)
        _, logged = proc.communicate(timeout=wait_s)
    poster.join(wait_s)
    return proc, logged

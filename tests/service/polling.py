"""Waiting on a spawned process's HTTP endpoint (the tests that start one before its Redis), and on a
process to end and a path to go (the tests that a server ends with its owner)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import httpx


def poller(timeout_s: float) -> httpx.Client:
    """One client for a loop that asks until a process answers, each ask on a new connection as a
    lone ``httpx.get`` makes it.

    Not ``httpx.get`` per ask: each builds a client whose SSL context loads the CA bundle, ~34 ms of
    CPU even for an ``http://`` URL (0.3 ms through one client); a loop asking every 50 ms while a
    ``serve`` child imports the app spent ~2 s of the test process's CPU per start, on a CI host
    whose 2 cores the suite keeps busy (docs/experiments.md, ci55)."""
    return httpx.Client(timeout=timeout_s, limits=httpx.Limits(max_keepalive_connections=0))


def until_status(url: str, status: int, proc: subprocess.Popen[str], timeout_s: float) -> httpx.Response:
    """The first answer from ``url`` with ``status``; fails when ``proc`` exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    with poller(1.0) as client:
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"{proc.args!r} exited: {proc.communicate()[1][-2000:]}"
            try:
                answer = client.get(url)
                if answer.status_code == status:
                    return answer
            except httpx.TransportError:
                pass
            time.sleep(0.05)
    raise AssertionError(f"{url} did not answer {status} within {timeout_s} s")


GONE_WITHIN_S = 30.0  # a bound for a loaded machine, not a speed: the server stops in milliseconds


def running(pid: int) -> bool:
    """Whether ``pid`` runs; a zombie does not (it holds no port nor memory). ``ps``: Linux and macOS."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):  # gone, or the pid is now another user's
        return False
    state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout
    return bool(state.strip()) and not state.strip().startswith("Z")


def waitable_within(pid: int, seconds: float) -> bool:
    """Whether our child ``pid`` has ended in a way its parent can reap (asked without reaping it), within
    ``seconds``. Stronger than ``gone_within`` for a threaded server: ``ps`` shows a process ``Zl`` once
    its main thread exits, while its other threads still run their exit and ``waitid`` does not see it
    yet; a restart asked then found the server still there (test_embedded_watcher, once at load ~20)."""
    deadline = time.monotonic() + seconds
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def removed_within(path: Path, seconds: float) -> bool:
    """Whether ``path`` is removed within ``seconds``."""
    deadline = time.monotonic() + seconds
    while path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def gone_within(pid: int, seconds: float) -> bool:
    """Whether ``pid`` stops running within ``seconds``."""
    deadline = time.monotonic() + seconds
    while running(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True

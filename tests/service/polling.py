"""Waiting on a spawned process's HTTP endpoint, for the tests that start one before its Redis."""

from __future__ import annotations

import subprocess
import time

import httpx


def until_status(url: str, status: int, proc: subprocess.Popen[str], timeout_s: float) -> httpx.Response:
    """The first answer from ``url`` with ``status``; fails when ``proc`` exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"{proc.args!r} exited: {proc.communicate()[1][-2000:]}"
        try:
            answer = httpx.get(url, timeout=1.0)
            if answer.status_code == status:
                return answer
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"{url} did not answer {status} within {timeout_s} s")

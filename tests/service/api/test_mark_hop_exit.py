"""A replica's exit while a cancelled handler's mark is being taken back (``service/api/mark_hop.py``).

A handler is given up at the service's shutdown, so its take-back thread runs as the app stops and
the process ends. A stalled Redis must not hold that through the take-back's retries (three command
timeouts): it is waited for one timeout, once, then cut and its mark left to lapse (logged). A Redis
that answers within that timeout must still get the take-back: the app's stop and the exit wait for
it, and the mark is gone as the process ends. Redis's writes are paused (``CLIENT PAUSE ... WRITE``)
by the process itself once its mark is written (``mark_hop_exit_child.py``); what tells the cases
apart is what the process logged and whether the mark was there as it ended, never how long it took.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from service.embedded import EmbeddedServer

ROOT = Path(__file__).resolve().parents[3]
CUT = "take-backs cut at shutdown"


@pytest.fixture
def server() -> Iterator[EmbeddedServer]:
    """A private server to pause (the session's is shared with other tests)."""
    with EmbeddedServer() as srv:
        yield srv


def _exit(server: EmbeddedServer, timeout_s: float, pause_ms: int, *schedule_id: str) -> tuple[str, str]:
    """The child's last line (``left`` or ``gone``) and its stderr; writes unpaused after it. The step
    is sent under ``schedule_id``, or an id the service draws."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ROLLOUT_ALLOWED_HOSTS": "testserver"}  # httpx names it
    child = [sys.executable, "-m", "tests.service.api.mark_hop_exit_child", server.url, str(timeout_s)]
    try:
        ended = subprocess.run(
            [*child, str(pause_ms), *schedule_id],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=120.0,
        )
    finally:
        redis.Redis.from_url(server.url).client_unpause()
    return ended.stdout.strip().splitlines()[-1], ended.stderr


def test_a_stalled_redis_does_not_hold_the_exit_through_the_take_back_s_retries(
    server: EmbeddedServer,
) -> None:
    """Writes paused for a minute, the command timeout 2 s: the take-back is cut after one timeout
    (its three tries would take three: the margin a loaded host may need before the app stops),
    once (not waited for again at the exit)."""
    left, logged = _exit(server, 2.0, 60_000, "gone")
    assert (left, logged.count(CUT)) == ("left", 1)


def test_a_take_back_redis_answers_within_the_timeout_lands_before_the_exit(server: EmbeddedServer) -> None:
    """Writes paused for 2 s, the command timeout 10 s: the exit waits for the take-back."""
    left, logged = _exit(server, 10.0, 2_000, "gone")
    assert (left, logged.count(CUT)) == ("gone", 0)


def test_a_drawn_id_s_take_back_is_waited_for_as_long(server: EmbeddedServer) -> None:
    """An id the service draws has no in-flight mark, only its step's planning entry, taken back by
    the same thread: the app's stop waits for it its own command timeout."""
    left, logged = _exit(server, 10.0, 2_000)
    assert (left, logged.count(CUT)) == ("gone", 0)

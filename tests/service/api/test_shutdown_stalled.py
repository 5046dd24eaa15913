"""A replica's SIGTERM while its Redis does not answer (``service/app.py``'s ``_stop``).

The app stops taking work, then waits one command timeout for what is under way on Redis: here,
the reaper's pass. It closes the Redis pool only once nothing is on it. Before this, the stop waited
5 s for the reaper and then closed the pool under a pass that was still running, and the reaper
logged ``Bad file descriptor``. A pass that Redis answers within the timeout still completes. A pass
that Redis does not answer is cut, and that loses nothing: the next pass of any replica reaps its
leases, once.

``serve`` runs in a child process. Its reaper's pass is held by pausing Redis's writes (``CLIENT
PAUSE ... WRITE``); the test waits until Redis reports that client as blocked, then sends SIGTERM.
The tests check the exit code, the log, and Redis's state once it answers again. They never check
how long anything took, except that a process stopped within a one-minute pause exits before Redis
resumes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from service.delivery import Delivery
from service.delivery.reaper import reap_all
from service.embedded import EmbeddedServer
from tests.service.api.stopped_child import serving, stopped_under_pause
from tests.service.delivery.conftest import schedule

WAIT_S = 60.0  # a bound against never, for a loaded host: met in about a second when right
LEFT_OPEN = "Redis pool left open to the process's exit: the reaper's pass still on it"


@pytest.fixture
def server() -> Iterator[EmbeddedServer]:
    """A private server to pause (the session's is shared with other tests)."""
    with EmbeddedServer() as srv:
        yield srv


def _stopped_mid_pass(
    server: EmbeddedServer, tmp_path: Path, timeout_s: float, pause_ms: int
) -> tuple[str, bool]:
    """Run ``serve`` on ``server`` with the command timeout ``timeout_s``, pause writes for
    ``pause_ms``, and queue behind the pause a schedule's publish and the lease of its one item, a
    lease that has lapsed already (the clock pinned at 0), then wait for the reaper's pass to be held
    too; send SIGTERM. Returns the process's stderr, and whether writes were still paused once it
    had exited (exit status 0: checked there)."""
    client = redis.Redis.from_url(server.url)
    lease = threading.Thread(target=_lapsed_lease, args=(server.url,))
    try:
        with serving("service.cli", server.url, tmp_path, timeout_s, WAIT_S) as (proc, _):
            client.client_pause(pause_ms, all=False)
            lease.start()
            _blocked(client, 2)  # the publish and the reaper's script
            return stopped_under_pause(proc, client, WAIT_S)
    finally:
        if lease.is_alive():
            client.client_unpause()
            lease.join()


def _lapsed_lease(url: str) -> None:
    """Publish schedule ``s`` and lease its item, on a clock pinned at 0: lapsed once written."""
    delivery = Delivery(redis.Redis.from_url(url, socket_timeout=2 * WAIT_S))
    delivery.publish(schedule("s", {"w": 1}, ttl_ms=100), now_ms=0)
    delivery.claim("s", "w", 1, now_ms=0)


def _blocked(client: redis.Redis, count: int) -> None:
    """Return once Redis holds ``count`` clients behind its pause."""
    deadline = time.monotonic() + WAIT_S
    while client.info("clients")["blocked_clients"] < count:
        assert time.monotonic() < deadline, f"Redis held fewer than {count} clients"
        time.sleep(0.01)


def test_a_pass_redis_does_not_answer_is_cut_and_the_pool_left_open_under_it(
    server: EmbeddedServer, tmp_path: Path
) -> None:
    """Writes paused for a minute, the command timeout 10 s: the process exits while Redis is still
    paused, with no traceback and no error from a pool closed under the pass (main's stop closed it
    after 5 s, within the pass's first try), and says it left the pool open to it. The cut pass's
    script never ran (Redis drops a closed connection's held command): once Redis answers, the
    next pass, any replica's, reaps the lapsed lease, once."""
    logged, paused = _stopped_mid_pass(server, tmp_path, 10.0, 60_000)
    delivery = Delivery(redis.Redis.from_url(server.url))
    failed = ("Traceback" in logged, "reaper pass failed" in logged, "Bad file descriptor" in logged)
    assert (paused, failed, logged.count(LEFT_OPEN)) == (True, (False, False, False), 1)
    assert delivery.progress("s").running == 1
    assert reap_all(delivery)["s"].requeued == 1
    assert (delivery.progress("s").queued, reap_all(delivery).get("s")) == (1, None)


def test_a_pass_redis_answers_within_the_timeout_completes_before_the_exit(
    server: EmbeddedServer, tmp_path: Path
) -> None:
    """Writes paused for 4 s, the command timeout 10 s: the stop waits for the pass (no cut), which
    then ends, and the pool is closed after it."""
    logged, _ = _stopped_mid_pass(server, tmp_path, 10.0, 4_000)
    failed = ("Traceback" in logged, "reaper pass failed" in logged, "Bad file descriptor" in logged)
    assert (failed, "left open" in logged) == ((False, False, False), False)

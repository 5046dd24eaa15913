"""A replica's SIGTERM while a plan runs and its Redis does not answer (``service/api/stopping.py``).

uvicorn waits for the request (10 s by default; 1 s here, ``stopped_child.CUT_AFTER_S``) and cancels
its handler; the plan ran on its planning thread to its budget (60 s here), published, and took its
mark back, and the process's exit waited for all of it.
Now the app's stop sets the signal the planner checks between its parts: the plan gives up, nothing
is published, and its take-back runs on a daemon the stop waits for one command timeout at most.

``serve`` runs in a child process whose ``lpt`` plan spends its budget in checked parts
(``tests/service/api/slow_plan.py``). Once it runs, Redis's writes are paused for half the plan's
budget and the test sends SIGTERM. The tests check how long nothing took but this: the process exits
while Redis is still paused, i.e. long before the plan's budget (main exited after the budget, and
after Redis resumed).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from service.api.stopping import GIVEN_UP_LOG
from service.delivery import Delivery
from service.embedded import EmbeddedServer
from tests.service.api.slow_plan import STARTED
from tests.service.api.stopped_child import CUT_AFTER_S, serving, stopped_under_pause
from tests.service.api_helpers import batch_body

pytestmark = pytest.mark.slow
SLOW_SERVE = "tests.service.api.slow_plan"  # ``serve`` whose lpt plan spends its budget in checked parts
WAIT_S = 120.0  # a bound against never, for a loaded host
BUDGET_MS = 60_000  # the plan's: the most a request may ask
PAUSE_MS = 30_000  # writes paused for half of it: main's exit came after both


@pytest.fixture
def server() -> Iterator[EmbeddedServer]:
    """A private server to pause (the session's is shared with other tests)."""
    with EmbeddedServer() as srv:
        yield srv


def _post(url: str, answers: list[object]) -> None:
    """POST the step that plans its whole budget; what it answers (none: the stop reset it)."""
    body = batch_body(schedule_id="slow", step=3, time_budget_ms=BUDGET_MS, policy="lpt")
    try:
        answers.append(httpx.post(f"{url}/schedule", json=body, timeout=WAIT_S).status_code)
    except httpx.HTTPError as error:
        answers.append(error)


def _stopped_mid_plan(server: EmbeddedServer, tmp_path: Path) -> tuple[str, bool]:
    """Run ``serve`` (command timeout 1 s), start the slow plan, pause writes once it runs, send
    SIGTERM. Returns the process's stderr, and whether writes were still paused once it had exited
    (exit status 0: checked there)."""
    started = tmp_path / "started"
    client = redis.Redis.from_url(server.url)
    answers: list[object] = []
    try:
        planted = {STARTED: str(started)}
        with serving(SLOW_SERVE, server.url, tmp_path, 1.0, WAIT_S, CUT_AFTER_S, **planted) as (proc, url):
            post = threading.Thread(target=_post, args=(url, answers), daemon=True)
            post.start()
            deadline = time.monotonic() + WAIT_S
            while not started.exists():
                assert time.monotonic() < deadline, "no plan started"
                assert proc.poll() is None, "serve ended before its plan started"
                time.sleep(0.01)
            client.client_pause(PAUSE_MS, all=False)
            stopped = stopped_under_pause(proc, client, WAIT_S)
    finally:
        client.client_unpause()
    post.join(WAIT_S)
    return stopped


def test_a_plan_running_at_the_stop_gives_up_and_the_exit_waits_for_no_budget(
    server: EmbeddedServer, tmp_path: Path
) -> None:
    """The process exits while Redis is still paused (main: after the plan's budget, which outlasts
    the pause), saying the plan was given up, with no pool closed under a thread; its take-back, on
    a stalled Redis, is cut (left to lapse) rather than waited through its retries. Nothing was
    published: the step that nobody waits for any more is not handed to the fleet."""
    logged, paused = _stopped_mid_plan(server, tmp_path)
    cut = "planning-thread give-ups' take-backs cut at shutdown" in logged
    closed_under = "Bad file descriptor" in logged or "AttributeError" in logged  # a pool closed mid-reply
    assert (paused, GIVEN_UP_LOG in logged, cut, closed_under) == (True, True, True, False), logged
    assert Delivery(redis.Redis.from_url(server.url)).active_schedules() == []

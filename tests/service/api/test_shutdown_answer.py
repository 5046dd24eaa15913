"""What the trainer is answered for a ``POST /schedule`` still planning when its replica's SIGTERM's
graceful wait (``ROLLOUT_GRACEFUL_SHUTDOWN_S``; 1 s here, ``stopped_child.CUT_AFTER_S``) ends (chaos12's
soak, ``docs/operations.md``, "Shutdown").

The plan gives up at the stop and publishes nothing (``test_shutdown_plan.py``), so the request
changed no state and a retry elsewhere is safe; the answer must say so: a 503 (``Retry-After``), or
no answer at all, both of which ``service.client`` retries. uvicorn cancels the handler it still
waits on and, the response not begun, answered the cancel as an exception in the app: 500 Internal
Server Error, which the client does not retry (``SchedulerAPIError.retryable``), so a trainer's step
failed at a rolling restart where a replica beside it would have planned it; ``serve`` now answers it
503 (``service/api/cut_answer.py``). chaos12's stop probe saw
it on every request still waiting in line for the plan slot when the wait ended (5 of 14 stops);
this test makes it every time with a plan that runs its whole budget in checked parts
(``slow_plan.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from service.client.wire import SchedulerAPIError
from service.delivery import Delivery
from service.embedded import EmbeddedServer
from service.settings import Settings
from tests.service.api.slow_plan import STARTED
from tests.service.api.stopped_child import CUT_AFTER_S, stopped_while_posting
from tests.service.api_helpers import batch_body

pytestmark = pytest.mark.slow
SLOW = "tests.service.api.slow_plan"  # serve, its plan running its whole budget in checked parts
WAIT_S = 120.0  # a bound against never, for a loaded host
BUDGET_MS = 60_000  # the plan's: it outlasts the graceful wait, the default 10 s too
# A plan that ends within the default wait (half of it), so is published during the stop under it, as
# test_serve_group_stop.py's quarter is; it outlasts CUT_AFTER_S by seconds, for a loaded host's late signal
WITHIN_THE_DEFAULT_MS = Settings.model_fields["graceful_shutdown_s"].default * 1000 // 2


@pytest.fixture
def server() -> Iterator[EmbeddedServer]:
    """A private server: the plan's keys are looked at after the replica's exit."""
    with EmbeddedServer() as srv:
        yield srv


def _answer_at_the_stop(
    server: EmbeddedServer, tmp_path: Path, budget_ms: int = BUDGET_MS
) -> int | httpx.HTTPError:
    """Run ``serve``, start the slow plan (``budget_ms``) under a chosen id, SIGTERM once it runs, wait
    for the exit; the POST's status, or the transport error where none came."""
    started, answers = tmp_path / "started", list[int | httpx.HTTPError]()

    def post(url: str) -> None:
        body = batch_body(schedule_id="stopped", step=5, time_budget_ms=budget_ms, policy="lpt")
        try:
            answers.append(httpx.post(f"{url}/schedule", json=body, timeout=WAIT_S).status_code)
        except httpx.HTTPError as error:
            answers.append(error)

    proc, logged = stopped_while_posting(
        SLOW, server.url, tmp_path, started, post, WAIT_S, **{STARTED: str(started)}
    )
    assert proc.returncode == 0, logged
    assert len(answers) == 1, logged
    return answers[0]


def _retried_by_the_client(answer: int | httpx.HTTPError) -> bool:
    """Whether ``service.client`` sends the request again (to this replica's successor or a peer)."""
    if isinstance(answer, httpx.HTTPError):
        return True  # no answer: ``ServiceUnreachableError``, always retried
    return SchedulerAPIError(answer, {}).retryable


def test_a_plan_cut_by_the_stop_is_answered_so_that_the_client_retries_it(
    server: EmbeddedServer, tmp_path: Path
) -> None:
    """Nothing published, nothing left marked, and an answer the trainer's client retries."""
    answer = _answer_at_the_stop(server, tmp_path)
    client = redis.Redis.from_url(server.url)
    assert Delivery(client).active_schedules() == []
    assert client.exists("rs:{stopped}:planning", "rs:step:5:planning", "rs:{stopped}:meta") == 0
    assert _retried_by_the_client(answer), f"answered {answer}"


def test_the_graceful_wait_is_the_one_the_setting_gives(server: EmbeddedServer, tmp_path: Path) -> None:
    """A plan the default wait lets publish is cut under a wait of ``CUT_AFTER_S``, shorter than the
    plan's budget (it runs its whole budget): answered 503, nothing published. ``serve`` ignoring
    ``ROLLOUT_GRACEFUL_SHUTDOWN_S`` answered it 200 (checked)."""
    assert CUT_AFTER_S * 1000 < WITHIN_THE_DEFAULT_MS
    answer = _answer_at_the_stop(server, tmp_path, WITHIN_THE_DEFAULT_MS)
    assert answer == 503, f"answered {answer}"
    assert Delivery(redis.Redis.from_url(server.url)).active_schedules() == []

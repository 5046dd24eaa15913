"""A ``POST /schedule`` with a deadline (``X-Envoy-Expected-Rq-Timeout-Ms``) whose Redis stalls right
after its publish (``service/pipeline/post_publish.py``).

The publish's script returned: the step is out, and what is left is bookkeeping (the step's set,
worker profiles, the retrain counter, the mark and planning entry taken back), each a command timeout
with its retries on a stopped Redis. chaos11's soak answered an 800 ms deadline 200 after 4.07 s so;
five of them held a 200 15.7 s at the default 1 s timeout (docs/experiments.md, postpub47). The answer
waits for them only until its deadline, and they land once Redis answers again. Redis is stopped far
longer than the deadline (SIGSTOP, from a wrapper around the real ``Delivery.publish``: the stall
begins as its script returns), and the tests read whether the answer came before it ended: a long
pause against a short answer, not a speed.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from service.delivery import keys
from service.embedded import EmbeddedServer
from service.pipeline.deadline import HEADER
from service.settings import Settings
from tests.service.api.replicas import context, replicas, until
from tests.service.api_helpers import batch_body

TIMEOUT_S = 5.0  # the service's command timeout: one bookkeeping call in line holds the answer this long
STALL_S = 4 * TIMEOUT_S  # how long Redis stays stopped unless the answer comes first
DEADLINE_MS = 3000  # the caller's: far inside the stall, room to plan and publish on a loaded host


@pytest.fixture
def server() -> Iterator[EmbeddedServer]:
    """A private server to stop (the session's is shared with other tests)."""
    with EmbeddedServer() as srv:
        yield srv


class StallAfterPublish:
    """Stops ``server`` as each real ``Delivery.publish`` returns (while ``armed``), and resumes it
    ``STALL_S`` later or when ``resume`` is called, whichever comes first."""

    def __init__(self, server: EmbeddedServer, http: httpx.AsyncClient) -> None:
        self.server, self.armed, self.stopped = server, True, False
        self._lock, self._timer = threading.Lock(), threading.Timer(0, lambda: None)
        delivery = context(http).delivery
        real = delivery.publish

        def publish(*args: Any, **kwargs: Any) -> Any:
            outcome = real(*args, **kwargs)
            if self.armed:
                with self._lock:
                    server.signal(signal.SIGSTOP)
                    self.stopped = True
                self._timer = threading.Timer(STALL_S, self.resume)
                self._timer.start()
            return outcome

        delivery.publish = publish  # type: ignore[method-assign]

    def resume(self) -> bool:
        """Let Redis run again; whether it was still stopped."""
        self._timer.cancel()
        with self._lock:
            was, self.stopped = self.stopped, False
            self.server.signal(signal.SIGCONT)
        return was


def _settings(server: EmbeddedServer, tmp_path: Path, timeout_s: float = TIMEOUT_S) -> Settings:
    return Settings(
        redis_url=server.url,
        model_dir=str(tmp_path / "models"),
        redis_timeout_s=timeout_s,
        retrain_every_steps=2,  # the retrain counter is asked after the publish too
    )


def test_a_deadline_request_whose_redis_stalls_after_its_publish_is_answered_before_redis_answers_again(
    server: EmbeddedServer, tmp_path: Path
) -> None:
    """Answered 200 at its deadline while Redis is still stopped (before: after every bookkeeping
    call's timeouts, once the stall ended); once Redis runs again the id is in its step's set, its
    worker profiles remembered and its planning entry gone, as when the answer waited for them."""
    reader = redis.Redis.from_url(server.url, socket_timeout=30, decode_responses=True)

    async def run() -> tuple[int, bool]:
        async with replicas(_settings(server, tmp_path)) as [http]:
            # a step published first leaves the pool its connections, as a busy replica's
            assert (await http.post("/schedule", json=batch_body(step=1))).status_code == 200
            stall = StallAfterPublish(server, http)
            try:
                body = batch_body(schedule_id="late-step-5", step=5, time_budget_ms=50)
                posted = await http.post("/schedule", json=body, headers={HEADER: str(DEADLINE_MS)})
            finally:
                stopped_at_answer = stall.resume()
            await until(lambda: reader.zcard(keys.step_planning(5)) == 0)  # the bookkeeping's last
            return posted.status_code, stopped_at_answer

    status, stopped_at_answer = asyncio.run(run())
    assert status == 200
    assert stopped_at_answer, "the answer waited for the bookkeeping until Redis answered again"
    assert reader.smembers(keys.step_schedules(5)) == {"late-step-5"}
    assert reader.hexists(keys.schedule_keys("late-step-5").meta, keys.PLANNED_PROFILES)
    assert reader.hgetall(keys.schedule_keys("late-step-5").planning) == {}


def test_a_stall_after_the_publish_is_not_learned_as_the_publish_s_pace(
    server: EmbeddedServer, tmp_path: Path
) -> None:
    """The publish's reserve for a deadline (``publish_pace``) is measured around the publish: the
    bookkeeping it used to include made two stalls after a publish the pace of every publish after
    them (a 32-trajectory step reserved 9.4 s), so the next request under a 3 s deadline was refused
    504 on a Redis answering again. Here it is planned and answered."""

    async def run() -> int:
        async with replicas(_settings(server, tmp_path, timeout_s=0.3)) as [http]:
            assert (await http.post("/schedule", json=batch_body(step=1))).status_code == 200
            stall = StallAfterPublish(server, http)
            headers = {HEADER: str(DEADLINE_MS)}
            for step in (2, 3):  # one stall alone is passed over as no pace (``STALLS_IGNORED``)
                try:
                    posted = await http.post("/schedule", json=batch_body(step=step), headers=headers)
                    assert posted.status_code == 200, posted.text
                finally:
                    stall.resume()
            stall.armed = False
            return (await http.post("/schedule", json=batch_body(step=4), headers=headers)).status_code

    assert asyncio.run(run()) == 200

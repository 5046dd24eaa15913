"""A ``POST /schedule`` whose in-flight mark Redis never answered (``service/pipeline/in_flight.py``).

Redis stalled (its process stopped, as a long fork, a swap storm or a paused VM does) past the
service's command timeout: the mark's write is already in Redis's socket (sent on a pooled
connection), the request answers 503, and the write lands once Redis runs again. docs/api.md says
an id whose request failed is a 404 to a DELETE, and that a request refused or failed takes its mark
back as it answers. A mark landing after that answer must not be left to lapse (the plan queue's
timeout + the budget + a minute): a trainer that gives the step up after the 503 would withdraw an id
no request holds (202) and find it taken for the retention. chaos10's soak met it: a 503 after 3.1 s
of a SIGSTOPped Redis left its entry 90 s.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from service.delivery import keys
from service.embedded import EmbeddedServer
from service.settings import Settings
from tests.service.api.replicas import context, replicas, until
from tests.service.api_helpers import batch_body

TIMEOUT_S = 0.3  # the service's Redis command timeout here: a stall of STALL_S outlasts its retries
STALL_S = 2.0
GRACE_S = 15.0  # how long the mark may outlive the stall: its own TTL here is 30 + 0.08 + 60 s


@pytest.fixture
def server() -> Iterator[EmbeddedServer]:
    """A private server to stop (the session's is shared with other tests)."""
    with EmbeddedServer() as srv:
        yield srv


def _answers(server: EmbeddedServer, tmp_path: Path) -> tuple[int, int, int]:
    """The POST's status during the stall, the mark's entries GRACE_S after Redis answers again (or
    as soon as none is left), and the DELETE's status then."""
    settings = Settings(redis_url=server.url, model_dir=str(tmp_path / "models"), redis_timeout_s=TIMEOUT_S)
    reader = redis.Redis.from_url(server.url, socket_timeout=10)
    planning = keys.schedule_keys("step").planning

    def answering() -> bool:
        try:
            return bool(reader.ping())
        except redis.RedisError:
            return False

    async def run() -> tuple[int, int, int]:
        async with replicas(settings) as [http]:
            # a step published first leaves the service's pool its connections, as a busy replica's:
            # the mark is then sent at once on one (a fresh connection's handshake would time out first)
            assert (await http.post("/schedule", json=batch_body(schedule_id="before"))).status_code == 200
            server.signal(signal.SIGSTOP)
            try:
                posted = await http.post("/schedule", json=batch_body(schedule_id="step"))
                await asyncio.sleep(STALL_S - 3 * TIMEOUT_S)  # the stall outlasts the request
            finally:
                server.signal(signal.SIGCONT)
            await until(answering)
            for _ in range(int(GRACE_S / 0.1)):
                if not reader.exists(planning):
                    break
                await asyncio.sleep(0.1)
            left = int(reader.hlen(planning))
            deleted = await http.delete("/schedule/step")
            return posted.status_code, left, deleted.status_code

    return asyncio.run(run())


def test_a_mark_whose_write_landed_after_the_request_s_503_is_not_left_to_withdraw_the_id(
    server: EmbeddedServer, tmp_path: Path
) -> None:
    posted, left, deleted = _answers(server, tmp_path)
    assert posted == 503
    assert (left, deleted) == (0, 404)


def test_a_request_whose_mark_redis_did_not_answer_writes_no_step_entry(
    server: EmbeddedServer, tmp_path: Path
) -> None:
    """Such a request answers 503 (``Mark.check``) and never publishes, so it is no part of its step:
    its step's planning entry (``service/pipeline/step_part.py``) and that entry's take-back, each a
    command timeout with its retries more on the stalled Redis, are not sent (the 503 had come after
    both), and no entry of it is left once Redis runs again."""
    settings = Settings(redis_url=server.url, model_dir=str(tmp_path / "models"), redis_timeout_s=TIMEOUT_S)
    reader = redis.Redis.from_url(server.url, socket_timeout=10)
    asked: list[str] = []

    async def run() -> int:
        async with replicas(settings) as [http]:
            assert (await http.post("/schedule", json=batch_body(schedule_id="before"))).status_code == 200
            delivery = context(http).delivery
            for name in (
                "mark_planning",
                "extend_planning",
                "unmark_planning",
                "enter_planning",
                "leave_planning",
            ):
                setattr(delivery, name, _recorded(name, getattr(delivery, name), asked))
            server.signal(signal.SIGSTOP)
            try:
                posted = await http.post("/schedule", json=batch_body(schedule_id="step", step=7))
            finally:
                server.signal(signal.SIGCONT)
            await until(lambda: bool(reader.ping()))
            return posted.status_code

    assert asyncio.run(run()) == 503
    assert asked == ["mark_planning", "unmark_planning"]
    assert reader.zcard(keys.step_planning(7)) == 0


def _recorded(name: str, call: Callable[..., Any], asked: list[str]) -> Callable[..., Any]:
    """``call`` (a method of the real delivery), its ``name`` appended to ``asked`` as it is made."""

    def recording(*args: Any, **kwargs: Any) -> Any:
        asked.append(name)
        return call(*args, **kwargs)

    return recording

"""Long-polls of ``GET /next`` queued on the pull state's lock at SIGTERM walk no claim after it: each
answers 204 (docs/sidecar.md, "Pull mode": a long-poll in flight at SIGTERM answers 204).

Found by chaos13's soak (docs/experiments.md): an idle pull sidecar's 7 long-polls held its exit for
the whole drain timeout. A poll checked the stop only before it waited for the lock, so each poll
queued behind a claim under way walked a claim of its own once the stop had come. On a long active
index at load, one after the other, they outlasted the drain. Real valkey. The claim under way is
held by a hook until the stop, and the test counts the claims begun after the stop, not seconds."""

from __future__ import annotations

import asyncio

import pytest
import redis

from service.delivery.protocol import Delivery
from service.sidecar.holdings import Held, Holdings
from service.sidecar.pull_state import PullState
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.procs import item, publish

POLLS = 7  # as many as the soak's idle sidecar had in flight


def test_polls_queued_behind_a_claim_at_the_stop_claim_nothing_and_answer_none(
    redis_client: redis.Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "other", {"w1": [item("a", 0, 10)]})  # an active schedule, nothing of w0's
    session = WorkerSession(delivery, Holdings(4), SessionSettings("w0", steal=False))
    stopped = False
    state = PullState(session, 60.0, stopping=lambda: stopped)
    claims_after_stop: list[int] = []
    claim = session.claim

    async def run() -> list[Held | None]:
        nonlocal stopped
        under_way, go_on = asyncio.Event(), asyncio.Event()

        async def slow_claim(want: int) -> list[Held]:  # the first holds the lock until the stop
            if stopped:
                claims_after_stop.append(want)
            under_way.set()
            await go_on.wait()
            return await claim(want)

        monkeypatch.setattr(session, "claim", slow_claim)
        polls = [asyncio.create_task(state.next_item(10.0)) for _ in range(POLLS)]
        await under_way.wait()
        for _ in range(10):  # let every other poll reach the lock and queue on it
            await asyncio.sleep(0)
        stopped = True
        go_on.set()
        return await asyncio.gather(*polls)

    answers = asyncio.run(run())
    assert claims_after_stop == []
    assert answers == [None] * POLLS

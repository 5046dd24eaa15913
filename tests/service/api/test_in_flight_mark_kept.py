"""A ``POST /schedule`` under a chosen id that lives past the life its in-flight mark was extended to
(a plan overrunning its budget on a starved host with no caller's deadline, a publish Redis holds)
keeps its mark until it ends (``service.pipeline.step_keeper``): a DELETE meanwhile withdraws the id
(202) and the request's publish is refused 409, where the mark had lapsed, the DELETE answered 404 and
the step the trainer gave up was published. On the real embedded valkey, the overrun held on Redis's
clock, the margin shortened so the test takes seconds."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import redis

from service.delivery import keys as keyspace
from service.pipeline import step_keeper
from service.pipeline.step_keeper import StepKeeper
from tests.service.api_helpers import batch_body
from tests.service.overrun import overrunning

MARGIN_S = 4.0  # the mark's margin, what each extension gives, and twice how near its deadline one is due
QUEUE_S = 0.2  # the plan queue's timeout: the mark's first life is this + the budget + the margin
PLANNING = keyspace.schedule_keys("overrun").planning


def test_a_delete_while_the_request_plans_past_its_mark_s_first_life_withdraws_the_step(
    make_client: Any, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch, keeper: StepKeeper
) -> None:
    """The request still plans a second past its mark's first deadline when its trainer DELETEs the
    id: 202 ``withdrawn`` (404 where the mark lapsed), the request's publish refused 409 (200 where it
    lapsed: the withdrawn step reached the fleet), nothing kept once it ends and a tick then writes no
    mark back."""
    monkeypatch.setattr(keyspace, "PLANNING_MARGIN_S", MARGIN_S)
    monkeypatch.setattr(step_keeper, "_TICKS_PER_MARGIN", 16)  # a tick every 0.25 s: 1.75 s of slack
    monkeypatch.setattr(step_keeper, "KEEPER", keeper)
    client = make_client(plan_queue_timeout_s=QUEUE_S)
    past, release = overrunning(monkeypatch, redis_client, QUEUE_S + MARGIN_S)
    body = batch_body(schedule_id="overrun", time_budget_ms=10)
    answers: list[Any] = []
    thread = threading.Thread(target=lambda: answers.append(client.post("/schedule", json=body)))
    thread.start()
    try:
        assert past.wait(60)
        withdrawn = client.delete("/schedule/overrun")
    finally:
        release.set()
        thread.join(30)
    assert (withdrawn.status_code, withdrawn.json()["status"]) == (202, "withdrawn")
    assert (answers[0].status_code, answers[0].json()["field"]) == (409, "schedule_id")
    assert keeper.held() == 0
    keeper.tick()  # a tick after the take-back writes nothing back
    assert not redis_client.exists(PLANNING)
    assert not redis_client.exists(keyspace.schedule_keys("overrun").meta)


def test_a_request_that_overruns_its_mark_s_first_life_and_publishes_leaves_no_mark(
    make_client: Any, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch, keeper: StepKeeper
) -> None:
    """Kept past its first deadline while it planned, the mark is gone with the publish, and the keeper
    holds nothing: a DELETE then cancels the published schedule, as any."""
    monkeypatch.setattr(keyspace, "PLANNING_MARGIN_S", MARGIN_S)
    monkeypatch.setattr(step_keeper, "_TICKS_PER_MARGIN", 16)
    monkeypatch.setattr(step_keeper, "KEEPER", keeper)
    client = make_client(plan_queue_timeout_s=QUEUE_S)
    past, release = overrunning(monkeypatch, redis_client, QUEUE_S + MARGIN_S)
    answers: list[Any] = []
    body = batch_body(schedule_id="overrun", time_budget_ms=10)
    thread = threading.Thread(target=lambda: answers.append(client.post("/schedule", json=body)))
    thread.start()
    try:
        assert past.wait(60)
        kept = redis_client.exists(PLANNING)
    finally:
        release.set()
        thread.join(30)
    assert kept == 1
    assert answers[0].status_code == 200
    assert (keeper.held(), redis_client.exists(PLANNING)) == (0, 0)
    keeper.tick()
    assert not redis_client.exists(PLANNING)
    assert client.delete("/schedule/overrun").json()["status"] == "cancelled"


def _deadline_ms(redis_client: redis.Redis, schedule_id: str, request_id: str) -> int:
    entry = redis_client.hget(keyspace.schedule_keys(schedule_id).planning, request_id)
    return int(str(entry).split(":")[1])


def test_a_tick_pushes_a_due_mark_or_withdrawal_on_and_lets_go_of_a_mark_taken_back(
    client: Any, redis_client: redis.Redis, keeper: StepKeeper
) -> None:
    """A mark near its deadline is pushed to the margin past now, and so is the withdrawal a DELETE
    put in a mark's place (the request still lives to be refused); one taken back meanwhile (the
    tick racing the request's answer) is not written back, and the keeper stops asking for it."""
    ctx = client.app.state.context
    ids = ("due", "withdrawn", "gone")
    for schedule_id in ids:
        ctx.delivery.mark_planning(schedule_id, "r", 1_000)
        ctx.delivery.extend_planning(schedule_id, "r", 2_000)
        keeper.hold(ctx, step_keeper.InFlight(schedule_id, "r"), 2.0)
    first = _deadline_ms(redis_client, "due", "r")
    ctx.delivery.cancel("withdrawn", withdraw_s=1)
    ctx.delivery.unmark_planning("gone", "r")
    try:
        keeper.tick()
        assert _deadline_ms(redis_client, "due", "r") > first + 50_000
        assert redis_client.pttl(keyspace.schedule_keys("withdrawn").withdrawn) > 50_000
        assert not redis_client.exists(keyspace.schedule_keys("withdrawn").planning)
        assert not redis_client.exists(keyspace.schedule_keys("gone").planning)
        assert keeper.held() == 2
    finally:
        for schedule_id in ids:
            keeper.let_go(step_keeper.InFlight(schedule_id, "r"))


def test_a_mark_held_past_the_longest_a_request_lives_is_let_go(
    client: Any, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch, keeper: StepKeeper
) -> None:
    """A mark whose take-back never came (a bug) is not pushed on for good: past ``LONGEST_S`` the
    keeper lets it go and it lapses at its deadline, the id no longer withdrawable."""
    ctx = client.app.state.context
    monkeypatch.setattr(step_keeper, "LONGEST_S", -1.0)
    ctx.delivery.mark_planning("leaked", "r", 1_000)
    ctx.delivery.extend_planning("leaked", "r", 2_000)
    first = _deadline_ms(redis_client, "leaked", "r")
    keeper.hold(ctx, step_keeper.InFlight("leaked", "r"), 2.0)
    keeper.tick()
    assert keeper.held() == 0
    assert _deadline_ms(redis_client, "leaked", "r") == first

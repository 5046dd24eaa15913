"""A request's take-back lets its step's planning entry go whatever the mark's take-back meets
(``service.pipeline.step_part.Arrived.release``): the mark's raised an error Redis did not answer
(redis-py's parser, a pool closed under a take-back cut at the stop: ``service/api/mark_hop.py``),
and the entry stayed held, the process's keeper pushing it on every tick for ``LONGEST_S`` (3 h), the
step kept out of every retrain that long, and its take-back never sent. On the real embedded valkey."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from service.api.schemas import ScheduleRequest
from service.delivery import keys as keyspace
from service.pipeline import step_keeper, step_part
from service.pipeline.deadline import NO_DEADLINE
from service.pipeline.step_keeper import StepKeeper
from tests.service.api_helpers import batch_body


def test_an_entry_is_let_go_and_taken_back_when_the_mark_s_take_back_raises(
    client: Any, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch, keeper: StepKeeper
) -> None:
    """The mark's take-back raises ``AttributeError`` (not a Redis error: it reaches the caller): the
    entry is no longer held by the keeper, nor left in its step's planning entries."""
    ctx = client.app.state.context
    monkeypatch.setattr(step_keeper, "KEEPER", keeper)
    body = ScheduleRequest.model_validate(batch_body(step=2) | {"schedule_id": "released"})
    arrived = step_part.arrive(ctx, body, "released", NO_DEADLINE)
    assert keeper.held() == 2  # the in-flight mark and the step's planning entry
    assert redis_client.zcard(keyspace.step_planning(2)) == 1

    def parser_gone(*_: object) -> None:
        raise AttributeError("'NoneType' object has no attribute 'read_response'")

    monkeypatch.setattr(ctx.delivery, "unmark_planning", parser_gone)
    with pytest.raises(AttributeError):
        arrived.release()
    assert keeper.held() == 0
    assert redis_client.zcard(keyspace.step_planning(2)) == 0


def test_an_entry_write_that_fails_past_redis_s_answer_leaves_no_entry_nor_mark(
    client: Any, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch, keeper: StepKeeper
) -> None:
    """The entry's write lands, then raises an error that is not Redis's failure (the parser of a
    connection closed as the reply came): the request fails at once, and neither its mark nor its
    entry is left to keep the id in flight and the step out of a retrain until their deadline."""
    ctx = client.app.state.context
    monkeypatch.setattr(step_keeper, "KEEPER", keeper)
    written = ctx.delivery.enter_planning

    def landed_then_lost(step: int, member: str, life_ms: int) -> None:
        written(step, member, life_ms)
        raise AttributeError("'NoneType' object has no attribute 'read_response'")

    monkeypatch.setattr(ctx.delivery, "enter_planning", landed_then_lost)
    body = ScheduleRequest.model_validate(batch_body(step=2) | {"schedule_id": "lost-reply"})
    with pytest.raises(AttributeError):
        step_part.arrive(ctx, body, "lost-reply", NO_DEADLINE)
    assert keeper.held() == 0
    assert redis_client.zcard(keyspace.step_planning(2)) == 0
    assert not redis_client.exists(keyspace.schedule_keys("lost-reply").planning)

"""A ``POST /schedule`` that lives past the deadline its step's planning entry was written with (a plan
overrunning its budget on a starved host, a publish Redis holds) keeps the entry live until it ends
(``service.pipeline.step_keeper``): an asked-for retrain in that time leaves the step out, where it
had found the entry past its deadline and fitted the step without the part. On the real embedded
valkey, the overrun held on Redis's clock, the margin shortened so the test takes seconds."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import redis

from service.delivery import keys as keyspace
from service.pipeline import step_keeper
from service.pipeline.step_keeper import Entry, StepKeeper
from tests.service.api_helpers import batch_body
from tests.service.learning.step_two import (
    prompts_from,
    ran_and_reported,
    retrained_steps,
)
from tests.service.overrun import overrunning

PLANNING = keyspace.step_planning(2)
MARGIN_S = 4.0  # the entry's margin, what each extension gives, and twice how near its deadline one is due
QUEUE_S = 0.2  # the plan queue's timeout: the entry's first life is this + the budget + the margin


def test_a_retrain_asked_while_a_part_overruns_its_entry_s_first_deadline_leaves_the_step_out(
    make_client: Any,
    redis_client: redis.Redis,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    keeper: StepKeeper,
) -> None:
    """Step 2's first part run and reported; its second part (a drawn id: no in-flight mark) still
    plans a second past its entry's first deadline when a retrain is asked: the step is left out
    ([0, 1, 2] where the entry lapsed), the part published after, and its entry gone once it ends."""
    monkeypatch.setattr(keyspace, "PLANNING_MARGIN_S", MARGIN_S)
    monkeypatch.setattr(step_keeper, "_TICKS_PER_MARGIN", 16)  # a tick every 0.25 s: 1.75 s of slack
    monkeypatch.setattr(step_keeper, "KEEPER", keeper)
    client = make_client(plan_queue_timeout_s=QUEUE_S)
    ran_and_reported(client, redis_client, "step-2a")
    past, release = overrunning(monkeypatch, redis_client, QUEUE_S + MARGIN_S)
    body = batch_body(prompts=4, step=2, time_budget_ms=10) | {"batch": prompts_from(8, 4)}
    answers: list[int] = []
    thread = threading.Thread(target=lambda: answers.append(client.post("/schedule", json=body).status_code))
    thread.start()
    assert past.wait(60)
    fitted = retrained_steps(client, tmp_path)
    release.set()
    thread.join(30)
    assert answers == [200]
    assert fitted == [0, 1]
    assert keeper.held() == 0
    keeper.tick()  # a tick after the take-back writes nothing back
    assert not redis_client.exists(PLANNING)


def _score(redis_client: redis.Redis, member: str) -> float | None:
    return redis_client.zscore(PLANNING, member)


def test_a_tick_pushes_a_held_entry_on_and_writes_back_none_taken_back(
    client: Any, redis_client: redis.Redis, driven_keeper: StepKeeper
) -> None:
    """The keeper's tick moves an entry near its deadline to the margin past now, leaves one far from
    it as it is (a request that ends in its first life is never written again), and writes back no
    member that is no longer there (a take-back is final)."""
    ctx = client.app.state.context
    ctx.delivery.enter_planning(2, "held", 1_000)
    ctx.delivery.enter_planning(2, "long", 3_600_000)
    first, long = _score(redis_client, "held"), _score(redis_client, "long")
    for member, life_s in (("held", 1.0), ("long", 3600.0), ("taken back", 1.0)):
        driven_keeper.hold(ctx, Entry(2, member), life_s)
    try:
        driven_keeper.tick()
        assert _score(redis_client, "held") > first + 50_000  # type: ignore[operator]
        assert _score(redis_client, "long") == long
        assert _score(redis_client, "taken back") is None
    finally:
        for member in ("held", "long", "taken back"):
            driven_keeper.let_go(Entry(2, member))


def test_an_entry_held_past_the_longest_a_request_lives_is_let_go(
    client: Any, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch, driven_keeper: StepKeeper
) -> None:
    """An entry whose take-back never came (a bug) is not pushed on for good: past ``LONGEST_S`` the
    keeper lets it go, with a warning, and it lapses at its deadline."""
    ctx = client.app.state.context
    monkeypatch.setattr(step_keeper, "LONGEST_S", -1.0)
    ctx.delivery.enter_planning(2, "leaked", 1_000)
    first = _score(redis_client, "leaked")
    driven_keeper.hold(ctx, Entry(2, "leaked"), 1.0)
    driven_keeper.tick()
    assert driven_keeper.held() == 0
    assert _score(redis_client, "leaked") == first

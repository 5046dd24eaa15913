"""The keeper of live requests' marks (``service.pipeline.step_keeper``) at its edges: one mark Redis
fails to keep, or one context whose keep raises, leaves the others kept; a keeper thread a
``BaseException`` ended is started again by the next hold. On the real embedded valkey; the faults
are a key of the wrong type, a Delivery method replaced by one that raises, a tick that raises."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import redis

from service.delivery import keys as keyspace
from service.pipeline import step_keeper
from service.pipeline.step_keeper import StepKeeper


def _deadline_ms(redis_client: redis.Redis, schedule_id: str) -> int:
    """The deadline of request ``r``'s mark under ``schedule_id``; 0 where it lapsed."""
    entry = redis_client.hget(keyspace.schedule_keys(schedule_id).planning, "r")
    return 0 if entry is None else int(str(entry).split(":")[1])


def _held(keeper: StepKeeper, ctx: Any, schedule_id: str) -> None:
    """``schedule_id`` marked for request ``r`` for 20 s and held: due at the next tick (within half
    of the 60 s margin of its deadline)."""
    ctx.delivery.mark_planning(schedule_id, "r", 1_000)
    ctx.delivery.extend_planning(schedule_id, "r", 20_000)
    keeper.hold(ctx, step_keeper.InFlight(schedule_id, "r"), 20.0)


def test_a_mark_redis_fails_to_keep_leaves_the_marks_after_it_kept(
    client: Any, redis_client: redis.Redis, driven_keeper: StepKeeper
) -> None:
    """The first mark's keep fails (its key of the wrong type: a master down or failing over on a
    cluster fails it the same way, at every tick): the mark after it is still pushed on, where the
    failure had ended the tick's marks and left it to lapse under its live request; the failed one
    stays held, tried again at the next tick."""
    ctx = client.app.state.context
    try:
        driven_keeper.hold(ctx, step_keeper.InFlight("broken", "r"), 20.0)
        redis_client.set(keyspace.schedule_keys("broken").planning, "not a hash")
        _held(driven_keeper, ctx, "fine")
        first = _deadline_ms(redis_client, "fine")
        driven_keeper.tick()
        assert _deadline_ms(redis_client, "fine") > first + 30_000
        assert driven_keeper.held() == 2
    finally:
        for schedule_id in ("broken", "fine"):
            driven_keeper.let_go(step_keeper.InFlight(schedule_id, "r"))


def test_a_context_whose_keep_raises_leaves_another_context_s_marks_kept(
    make_client: Any, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch, driven_keeper: StepKeeper
) -> None:
    """One app's keep raises something other than Redis's failure (redis-py's parser on a pool that
    app's stop closed, a bug): another app's mark in the same process is still pushed on."""
    stopped, live = (make_client().app.state.context for _ in range(2))

    def broken(*args: Any, **kwargs: Any) -> bool:
        raise AttributeError("'NoneType' object has no attribute 'read_response'")

    try:
        _held(driven_keeper, stopped, "stopped")
        monkeypatch.setattr(stopped.delivery, "keep_mark", broken)
        _held(driven_keeper, live, "live")
        first = _deadline_ms(redis_client, "live")
        driven_keeper.tick()
        assert _deadline_ms(redis_client, "live") > first + 30_000
    finally:
        for schedule_id in ("stopped", "live"):
            driven_keeper.let_go(step_keeper.InFlight(schedule_id, "r"))


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # its death is the point
def test_a_hold_after_the_keeper_thread_died_of_a_base_exception_starts_another(
    client: Any, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch, keeper: StepKeeper
) -> None:
    """A tick that raises a ``SystemExit`` (not caught: ``_run`` catches ``Exception``) ends the
    thread with ``_thread`` still set; the next hold starts another, which keeps the mark: before,
    no thread ran again in the process and every mark and entry lapsed under its live request."""
    monkeypatch.setattr(step_keeper, "_TICKS_PER_MARGIN", 600)  # a tick every 0.1 s
    ctx = client.app.state.context
    real_tick, raised = keeper.tick, threading.Event()

    def tick_once_fatal() -> None:
        if not raised.is_set():
            raised.set()
            raise SystemExit("a tick's fatal error")
        real_tick()

    monkeypatch.setattr(keeper, "tick", tick_once_fatal)
    try:
        _held(keeper, ctx, "first")
        dead = keeper._thread
        assert dead is not None
        dead.join(60)
        assert raised.is_set()
        assert not dead.is_alive()
        _held(keeper, ctx, "second")
        first = _deadline_ms(redis_client, "second")
        for _ in range(600):  # a live thread pushes it at its first tick; none ever does otherwise
            if _deadline_ms(redis_client, "second") > first + 30_000:
                break
            threading.Event().wait(0.1)
        assert _deadline_ms(redis_client, "second") > first + 30_000
    finally:
        for schedule_id in ("first", "second"):
            keeper.let_go(step_keeper.InFlight(schedule_id, "r"))


def _keeps_sent(ctx: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids of the marks ``ctx``'s keeps are sent for, in order, each keep still sent to Redis."""
    sent: list[str] = []
    keep = ctx.delivery.keep_mark

    def counted(schedule_id: str, *args: Any, **kwargs: Any) -> bool:
        sent.append(schedule_id)
        return bool(keep(schedule_id, *args, **kwargs))

    monkeypatch.setattr(ctx.delivery, "keep_mark", counted)
    return sent


def test_a_tick_writes_only_what_is_due_and_what_it_pushed_is_not_due_again(
    client: Any, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch, driven_keeper: StepKeeper
) -> None:
    """A mark with more than half of the margin left (40 s of 60) is not sent at a tick; one within
    it is, once: pushed a whole margin on, it is not due at the next tick (no traffic per tick)."""
    ctx = client.app.state.context
    sent = _keeps_sent(ctx, monkeypatch)
    try:
        ctx.delivery.mark_planning("far", "r", 1_000)
        ctx.delivery.extend_planning("far", "r", 40_000)
        driven_keeper.hold(ctx, step_keeper.InFlight("far", "r"), 40.0)
        _held(driven_keeper, ctx, "due")
        far = _deadline_ms(redis_client, "far")
        driven_keeper.tick()
        driven_keeper.tick()
        assert (sent, _deadline_ms(redis_client, "far")) == (["due"], far)
    finally:
        for schedule_id in ("far", "due"):
            driven_keeper.let_go(step_keeper.InFlight(schedule_id, "r"))


def test_entries_redis_fails_to_keep_leave_the_marks_of_their_context_kept(
    client: Any, redis_client: redis.Redis, driven_keeper: StepKeeper
) -> None:
    """The step's planning entries cannot be kept (their key of the wrong type): that failure is the
    entries' alone, and the same context's due mark is still pushed on at the tick."""
    ctx = client.app.state.context
    entry = step_keeper.Entry(7, "broken")
    try:
        redis_client.set(keyspace.step_planning(7), "not a zset")
        driven_keeper.hold(ctx, entry, 20.0)
        _held(driven_keeper, ctx, "fine")
        first = _deadline_ms(redis_client, "fine")
        driven_keeper.tick()
        assert _deadline_ms(redis_client, "fine") > first + 30_000
    finally:
        driven_keeper.let_go(entry)
        driven_keeper.let_go(step_keeper.InFlight("fine", "r"))
        redis_client.delete(keyspace.step_planning(7))


def test_a_mark_redis_failed_to_keep_beside_entries_kept_is_tried_again_at_the_next_tick(
    client: Any, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch, driven_keeper: StepKeeper
) -> None:
    """The context's entries were kept and its one mark's keep failed: the mark is not taken for
    pushed on with them, so the next tick sends it again."""
    ctx = client.app.state.context
    sent = _keeps_sent(ctx, monkeypatch)
    entry, mark = step_keeper.Entry(2, "held"), step_keeper.InFlight("broken", "r")
    try:
        ctx.delivery.enter_planning(2, "held", 1_000)
        driven_keeper.hold(ctx, entry, 1.0)
        driven_keeper.hold(ctx, mark, 20.0)
        redis_client.set(keyspace.schedule_keys("broken").planning, "not a hash")
        driven_keeper.tick()
        driven_keeper.tick()
        assert sent == ["broken", "broken"]
    finally:
        driven_keeper.let_go(entry)
        driven_keeper.let_go(mark)

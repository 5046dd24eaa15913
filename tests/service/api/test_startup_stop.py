"""What the app's stop may close while a thread is still on the Redis pool (``service/startup.py``).

``Startup.stop`` closes the pool only once nothing may still be on it: the retrain lock's release,
the reaper's pass, a try at the cluster, a planning thread holding its token, or the take-backs the
app cut (``in_use``). A connection closed mid-reply fails the thread reading it with an error that is
not a Redis one, so each of these keeps the pool open, and the warning names it. ``halt`` alone
already stops the reaper's passes. Each test runs on the session's real server and checks what the
stop decided, never how long anything took.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import anyio
import pytest
import redis
from fastapi.testclient import TestClient

from service.api import mark_hop
from service.api.settling import Settling
from service.app import create_app
from service.context import Context
from service.metrics import Metrics
from service.settings import Settings
from service.startup import Startup
from tests.service.api.replicas import WAIT_S

LEFT_OPEN = "Redis pool left open to the process's exit: "


@pytest.fixture
def startup(redis_url: str, tmp_path: Path) -> Iterator[Startup]:
    """A started ``Startup`` on the session's server, its context built; stopped again afterwards."""
    settings = Settings(redis_url=redis_url, model_dir=str(tmp_path), redis_timeout_s=WAIT_S)
    started = Startup(settings, Metrics(), SimpleNamespace())
    started.begin()
    assert started.state.context is not None
    yield started
    started.stop(WAIT_S)


@pytest.fixture
def held_key(redis_client: redis.Redis) -> Iterator[str]:
    """A list no one pushes to but the test: a ``BLPOP`` on it is a call on Redis until then."""
    key = f"test:startup-stop:{uuid.uuid4().hex}"
    yield key
    redis_client.delete(key)


def _context(startup: Startup) -> Context:
    context: Context = startup.state.context
    return context


def _held_on_redis(context: Context, key: str, timeout_s: float) -> None:
    """A call on the context's pool that Redis answers after ``timeout_s`` (0: once the test pushes)."""
    context.redis.blpop([key], timeout=timeout_s)


def _left_open_to(caplog: pytest.LogCaptureFixture) -> str:
    """What the stop's warning names as still on the pool ("" where it closed it)."""
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith(LEFT_OPEN)] or [""]
    return line.removeprefix(LEFT_OPEN)


def _answer_held(redis_client: redis.Redis, key: str) -> None:
    redis_client.rpush(key, "go")


def test_a_stop_with_nothing_under_way_closes_the_pool(
    startup: Startup, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="service.app"):
        assert startup.stop(WAIT_S) is True
    assert _left_open_to(caplog) == ""


def test_take_backs_the_app_cut_keep_the_pool_open(
    startup: Startup, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="service.app"):
        assert startup.stop(WAIT_S, in_use=True) is False
    assert "give-ups' take-backs" in _left_open_to(caplog)


def test_a_planning_thread_holding_its_token_keeps_the_pool_open(
    startup: Startup, caplog: pytest.LogCaptureFixture
) -> None:
    """A plan still running on its thread (a token of ``plan_threads`` borrowed) may be on Redis."""
    planning, finish = threading.Event(), threading.Event()

    def plan() -> None:
        planning.set()
        finish.wait(WAIT_S)

    async def stop_while_planning() -> bool:
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: anyio.to_thread.run_sync(plan, limiter=_context(startup).plan_threads))
            await anyio.to_thread.run_sync(planning.wait, WAIT_S)
            closed = startup.stop(WAIT_S)
            finish.set()
        return closed

    with caplog.at_level(logging.WARNING, logger="service.app"):
        assert anyio.run(stop_while_planning) is False
    assert "planning threads" in _left_open_to(caplog)


def test_a_lock_release_still_on_redis_when_the_window_ends_keeps_the_pool_open(
    startup: Startup,
    redis_client: redis.Redis,
    held_key: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The release, started by the stop's ``halt``, is still waiting on Redis at the window's end
    (none left: 0 s): it is named, and the pool is left to it."""
    context = _context(startup)
    monkeypatch.setattr(context.retrainer.lock, "release", lambda: _held_on_redis(context, held_key, 0))
    try:
        with caplog.at_level(logging.WARNING, logger="service.app"):
            assert startup.stop(0.0) is False
    finally:
        _answer_held(redis_client, held_key)
        # ended before the test's flush: a release slow to start found the answer flushed and
        # blocked for good, and ran on to its worker's end (threads61)
        assert startup._release is not None
        startup._release.join(WAIT_S)
    assert "the retrain lock's release" in _left_open_to(caplog)


def test_a_lock_release_redis_answers_within_the_window_is_waited_for_then_the_pool_closed(
    startup: Startup, held_key: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The release's call is answered a second after it is sent, well within the window: the stop
    waits for it instead of finding it running at once, and closes the pool after it."""
    context = _context(startup)
    monkeypatch.setattr(context.retrainer.lock, "release", lambda: _held_on_redis(context, held_key, 1))
    with caplog.at_level(logging.WARNING, logger="service.app"):
        assert startup.stop(WAIT_S) is True
    assert _left_open_to(caplog) == ""


def test_halt_alone_ends_the_reapers_passes(redis_url: str, tmp_path: Path) -> None:
    """``halt`` (the app's stop, before it waits for anything) starts no reaper pass after the current
    one: the reaper's thread ends without ``stop``."""
    before = set(threading.enumerate())
    settings = Settings(redis_url=redis_url, model_dir=str(tmp_path), redis_timeout_s=WAIT_S)
    startup = Startup(settings, Metrics(), SimpleNamespace())
    startup.begin()
    try:
        (reaper,) = [t for t in set(threading.enumerate()) - before if t.name == "delivery-reaper"]
        startup.halt()
        reaper.join(WAIT_S)
        assert not reaper.is_alive()
    finally:
        startup.stop(WAIT_S)


def test_the_apps_stop_leaves_the_pool_to_a_take_back_it_cut(
    live_settings: Settings, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A give-up's take-back still under way when the app's stop window ends is cut (logged), and the
    pool is left open to it (``service/app.py``'s ``_stop`` tells ``Startup.stop`` so)."""
    monkeypatch.setattr(mark_hop, "TAKE_BACKS", Settling("in-flight mark take-backs"))
    entered, answered = threading.Event(), threading.Event()

    def take_back() -> None:
        with mark_hop.TAKE_BACKS.under_way():
            entered.set()
            answered.wait(WAIT_S)

    settings = live_settings.model_copy(update={"redis_timeout_s": 0.2})
    taking_back = threading.Thread(target=take_back, name="shared-pool-thread")
    try:
        with caplog.at_level(logging.WARNING, logger="service.app"), TestClient(create_app(settings)):
            taking_back.start()
            assert entered.wait(WAIT_S)
    finally:
        answered.set()
        taking_back.join(WAIT_S)
    assert "give-ups' take-backs" in _left_open_to(caplog)

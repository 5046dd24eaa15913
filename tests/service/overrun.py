"""A request that plans past the first life of what it holds in Redis (its in-flight mark, its step's
planning entry), on Redis's clock, so a test can act in the window where only the keeper
(``service/pipeline/step_keeper.py``) keeps them: tests/service/api/test_in_flight_mark_kept.py and
tests/service/learning/test_planning_entry_kept.py."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import redis

from service.pipeline import stages


def redis_now_ms(redis_client: redis.Redis) -> int:
    """Redis's own clock (``TIME``), the one the mark's and the entry's deadlines are on."""
    seconds, micros = redis_client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def overrunning(
    monkeypatch: pytest.MonkeyPatch, redis_client: redis.Redis, first_life_s: float
) -> tuple[threading.Event, threading.Event]:
    """Each request, once planning, waits on Redis's clock until ``first_life_s`` (its holds' first
    life: the plan queue's timeout and the margin; the budget, 10 ms, is inside the 1 s more) and 1 s
    have passed, sets the first event and plans once the second is set (or after 30 s)."""
    past, release = threading.Event(), threading.Event()
    original = stages._plans

    def overrun(*args: Any, **kwargs: Any) -> Any:
        until = redis_now_ms(redis_client) + first_life_s * 1000 + 1000
        while redis_now_ms(redis_client) < until:
            release.wait(0.05)
        past.set()
        release.wait(30)
        return original(*args, **kwargs)

    monkeypatch.setattr(stages, "_plans", overrun)
    return past, release

"""A stop that finds no retrain running answers after that retrain's last line, never before it.

``Retrainer.stop`` decides whether a retrain asked for still runs by taking its ``_running`` lock:
taken, it answers True (none runs) and says nothing. The retrain released that lock before its
``retrain done`` line, so a stop that took it in between answered True, the replica went on closing
its log streams, and the line came after (learn54): the one line the stop's answer says will not come.
Here the stop runs at the retrain's release of that lock, to its answer, before the retrain's thread
goes on: deterministic, no race loop. Real Redis, real LightGBM, the real store and stop; the lock is
wrapped only to run the stop at that point.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.context import Context
from service.settings import Settings
from tests.service.api_helpers import actual_history

WAIT_S = 60.0  # a bound on the test's own wait for the stop's thread
ANSWERED = "the stop answered"


class _Lines(logging.Handler):
    """Every line in its order, and where the stop answered (``answered``)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[tuple[str, str]] = []
        self.guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        with self.guard:
            self.lines.append((record.name, record.getMessage()))

    def answered(self, idle: bool) -> None:
        with self.guard:
            self.lines.append(("test", f"{ANSWERED} {idle}"))


class _StopAtRelease:
    """The retrainer's ``_running`` lock: the first release runs ``stop(0.0)`` on a thread of its own
    and waits for its answer before the releasing thread goes on."""

    def __init__(self, inner: threading.Lock, retrainer: Any, lines: _Lines) -> None:
        self._inner, self._retrainer, self._lines = inner, retrainer, lines
        self.stopped = False

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self._inner.acquire(blocking, timeout)

    def locked(self) -> bool:
        return self._inner.locked()

    def release(self) -> None:
        self._inner.release()
        if self.stopped:
            return
        self.stopped = True
        stopper = threading.Thread(target=lambda: self._lines.answered(self._retrainer.stop(0.0)))
        stopper.start()
        stopper.join(WAIT_S)
        assert not stopper.is_alive(), "the stop waits on the retrain's thread, which waits on it"


@pytest.fixture
def lines() -> Iterator[_Lines]:
    handler = _Lines()
    root = logging.getLogger()
    root.addHandler(handler)
    level = root.level
    root.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        root.setLevel(level)
        root.removeHandler(handler)


def test_a_stop_that_finds_a_retrain_ended_answers_after_its_retrain_done_line(
    live_settings: Settings, lines: _Lines
) -> None:
    with TestClient(create_app(live_settings)) as client:
        assert client.post("/actuals", json={"actuals": actual_history(steps=3)}).status_code == 200
        ctx: Context = client.app.state.context  # type: ignore[attr-defined]
        retrainer: Any = ctx.retrainer
        wrapped = _StopAtRelease(retrainer._running, retrainer, lines)
        retrainer._running = wrapped
        result = retrainer.retrain_now()
        assert wrapped.stopped
    said = [message for _, message in lines.lines]
    answer = next(i for i, message in enumerate(said) if message.startswith(ANSWERED))
    assert said[answer] == f"{ANSWERED} True"  # it found none running: no line of its own
    assert "retrain done" in said[:answer]
    retrains = ("service.models", "service.retrain")
    assert [line for line in lines.lines[answer + 1 :] if line[0] in retrains] == []
    assert result.version == ctx.models.version  # stored and serving

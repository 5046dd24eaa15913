"""A retrain's line that passed its check before the stop abandoned it is out before the stop's line.

The lines a retrain logs through the model service are muted once the stop abandons it
(``service.learning.retrain_lines``). That check and the line's output were two steps: a line
checked just before the abandonment reached the handlers after the stop's ``retrain abandoned ...
logs nothing more`` (learn53). Here the model service's ``retrained`` line is held between its
check and its handlers until the stop has either said its line or waits to (a handler's filter
holds it: it runs before the handler takes its lock); a stop that waits must wait for it, not pass
it. Real Redis, real LightGBM, the real store and stop; the abandonment's lock is wrapped only to
see the stop wait on it.
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

WAIT_S = 60.0  # a bound on the test's own waits


class _SeenWaiting:
    """The retrainer's lock, saying when a thread finds it held by another and waits."""

    def __init__(self, inner: Any, waits: threading.Event) -> None:
        self._inner = inner
        self._waits = waits

    def __enter__(self) -> object:
        if not self._inner.acquire(blocking=False):
            self._waits.set()
            self._inner.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self._inner.release()


class _Lines(logging.Handler):
    """Every line in its order; ``stop_said`` once the stop's line is among them."""

    def __init__(self, stop_said: threading.Event) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[tuple[str, str]] = []
        self._stop_said = stop_said

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((record.name, record.getMessage()))
        if record.getMessage().startswith("retrain abandoned"):
            self._stop_said.set()


class _HeldRetrained(logging.Handler):
    """Holds the model service's ``retrained`` line, past its check, until the stop said or waits."""

    def __init__(self, held: threading.Event, go: threading.Event) -> None:
        super().__init__(logging.DEBUG)
        self._held, self._go = held, go

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage() == "retrained":
            self._held.set()
            assert self._go.wait(WAIT_S)
        return False

    def emit(self, record: logging.LogRecord) -> None:
        raise AssertionError("filtered out")


@pytest.fixture
def handlers() -> Iterator[tuple[threading.Event, threading.Event, _Lines]]:
    """The ``retrained`` line held on its way (``held`` once it is) until ``go``; every line kept."""
    held, go = threading.Event(), threading.Event()
    lines = _Lines(go)  # the stop's line said lets the held line go
    models, root = logging.getLogger("service.models"), logging.getLogger()
    hold = _HeldRetrained(held, go)
    models.addHandler(hold)  # before the root's handlers: the line is held on its way to them
    root.addHandler(lines)
    level = root.level
    root.setLevel(logging.INFO)
    try:
        yield held, go, lines
    finally:
        root.setLevel(level)
        root.removeHandler(lines)
        models.removeHandler(hold)


def test_a_line_checked_before_the_abandonment_is_not_said_after_the_stops_line(
    live_settings: Settings,
    handlers: tuple[threading.Event, threading.Event, _Lines],
) -> None:
    held, go, lines = handlers
    outcome: list[object] = []
    with TestClient(create_app(live_settings)) as client:
        assert client.post("/actuals", json={"actuals": actual_history(steps=3)}).status_code == 200
        ctx: Context = client.app.state.context  # type: ignore[attr-defined]
        retrainer: Any = ctx.retrainer
        retrainer._said = _SeenWaiting(retrainer._said, go)  # the stop waiting on it lets the line go
        retrain = threading.Thread(target=lambda: outcome.append(retrainer.retrain_now("request")))
        retrain.start()
        assert held.wait(WAIT_S)  # stored, and its ``retrained`` line checked and on its way
        assert retrainer.stop(0.0) is False  # abandoned: still running
        retrain.join(WAIT_S)
        assert not retrain.is_alive()
    assert len(outcome) == 1  # stored whole (past its fence)
    said = [message for _, message in lines.lines]
    stop = next(i for i, m in enumerate(said) if m.startswith("retrain abandoned"))
    assert "storing its version" in said[stop]
    assert "retrained" in said[:stop]  # out before the stop's line
    retrains = ("service.models", "service.retrain")
    assert [line for line in lines.lines[stop + 1 :] if line[0] in retrains] == []

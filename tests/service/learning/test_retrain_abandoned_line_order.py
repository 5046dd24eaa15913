"""A retrain's line that passed its check before the stop abandoned it is out before the stop's line.

The lines a retrain logs through the model service are muted once the stop abandons it
(``service.learning.retrain_lines``). That check and the line's output were two steps: a line
checked just before the abandonment reached the handlers after the stop's ``retrain abandoned ...
logs nothing more`` (learn53). Here the model service's ``retrained`` line is held between its
check and its handlers until the stop has either said its line or waits to (a handler's filter
holds it: it runs before the handler takes its lock); a stop that waits must wait for it, not pass
it. Real Redis, real LightGBM, the real store and stop; the abandonment's lock is wrapped only to
see the stop wait on it, and to pick which of the two goes on first once the held line is out.

The stop's ``retrain abandoned ... still running`` line once came after the retrain had gone on,
stored, said ``retrain done`` and ended, and said of it ``it stores no version`` (stopline53, 1 in
a combined run at load 20): the stop decided it still ran before waiting for that lock. A stop
that finds the retrain ended once it has the lock abandons nothing and says so by its answer.
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
from tests.service.api_helpers import actual_history, with_settings

EVERY = 2  # steps between automatic retrains
WAIT_S = 60.0  # a bound on the test's own waits


class _SeenWaiting:
    """The retrainer's lock, saying when a thread finds it held by another and waits (``waits``),
    and ordering the stop and the retrain once the held line is out: ``first="stop"``, the retrain,
    having let go of the lock, waits for the stop's line; ``first="retrain"``, the stop waits for
    the retrain's thread to end before it takes the lock."""

    def __init__(self, inner: Any, waits: threading.Event, stop_said: threading.Event, first: str) -> None:
        self._inner = inner
        self._waits, self._stop_said, self._first = waits, stop_said, first
        self.retrain: threading.Thread | None = None

    def __enter__(self) -> object:
        if not self._inner.acquire(blocking=False):
            self._waits.set()
            if self._first == "retrain" and self.retrain is not None:
                self.retrain.join(WAIT_S)
            self._inner.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self._inner.release()
        if self._first == "stop" and self._waits.is_set() and threading.current_thread() is self.retrain:
            assert self._stop_said.wait(WAIT_S)


class _Lines(logging.Handler):
    """Every line in its order; ``stop_said`` once the stop's line is among them."""

    def __init__(self, stop_said: threading.Event) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[tuple[str, str]] = []
        self.stop_said = stop_said

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((record.name, record.getMessage()))
        if record.getMessage().startswith("retrain abandoned"):
            self.stop_said.set()


class _HeldRetrained(logging.Handler):
    """Holds the model service's ``retrained`` line, past its check, until the stop waits."""

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
    lines = _Lines(threading.Event())
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


def _stop_beside_the_held_line(
    settings: Settings, handlers: tuple[threading.Event, threading.Event, _Lines], first: str, trigger: str
) -> tuple[bool, bool]:
    """A retrain (asked for, or started by a step: ``trigger``), stored, its ``retrained`` line
    held; ``stop(0.0)`` then, ``first`` going on first once the stop waits for the lock
    (``_SeenWaiting``): the stop's answer, and whether a new version serves."""
    held, go, lines = handlers
    with TestClient(create_app(with_settings(settings, retrain_every_steps=EVERY))) as client:
        assert client.post("/actuals", json={"actuals": actual_history(steps=3)}).status_code == 200
        ctx: Context = client.app.state.context  # type: ignore[attr-defined]
        retrainer: Any = ctx.retrainer
        before = ctx.models.version
        said = _SeenWaiting(retrainer._said, go, lines.stop_said, first)  # the stop waiting lets the line go
        retrainer._said = said
        if trigger == "request":
            said.retrain = threading.Thread(target=retrainer.retrain_now, args=("request",))
            said.retrain.start()
        else:
            assert retrainer.after_step(0) is False  # the first step seen only sets the mark
            assert retrainer.after_step(EVERY) is True
            said.retrain = retrainer.background
        assert held.wait(WAIT_S)  # stored, and its ``retrained`` line checked and on its way
        idle = retrainer.stop(0.0)
        assert said.retrain is not None
        said.retrain.join(WAIT_S)
        assert not said.retrain.is_alive()
        return bool(idle), ctx.models.version != before


TRIGGERS = pytest.mark.parametrize("trigger", ["request", "step"])


@TRIGGERS
def test_a_line_checked_before_the_abandonment_is_not_said_after_the_stops_line(
    live_settings: Settings, handlers: tuple[threading.Event, threading.Event, _Lines], trigger: str
) -> None:
    idle, stored = _stop_beside_the_held_line(live_settings, handlers, "stop", trigger)
    assert idle is False  # abandoned: still running
    assert stored  # whole, past its fence: serving
    lines = handlers[2].lines
    said = [message for _, message in lines]
    stop = next(i for i, m in enumerate(said) if m.startswith("retrain abandoned"))
    assert "storing its version" in said[stop]
    assert "retrained" in said[:stop]  # out before the stop's line
    retrains = ("service.models", "service.retrain")
    assert [line for line in lines[stop + 1 :] if line[0] in retrains] == []


@TRIGGERS
def test_a_retrain_that_ended_while_the_stop_waited_to_say_its_line_is_not_abandoned(
    live_settings: Settings, handlers: tuple[threading.Event, threading.Event, _Lines], trigger: str
) -> None:
    idle, stored = _stop_beside_the_held_line(live_settings, handlers, "retrain", trigger)
    assert idle is True  # none runs: it ended, its version stored, before the stop had the lock
    assert stored
    said = [message for _, message in handlers[2].lines]
    assert [m for m in said if m.startswith("retrain abandoned")] == []
    assert said.index("retrained") < said.index("retrain done")

"""A request waiting for a plan slot as its replica stops is refused there, 503 "the replica is
stopping" (``PlanSlots.stop``, called by the app's stop): it waited until a plan ahead gave its slot
back, up to the plan queue's timeout, its planning thread and the process's exit held as long."""

from __future__ import annotations

import threading
import time

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.limits import PlanSlots
from service.problems.table import UnavailableError
from service.settings import Settings
from tests.service.api_helpers import with_settings

BOUND_S = 30.0  # a bound against never, a twentieth of the queue's timeout: right, it returns at once
QUEUE_TIMEOUT_S = 600.0


def _in_line(slots: PlanSlots, answers: list[BaseException | float]) -> threading.Thread:
    """A request waiting for one of ``slots`` on a thread of its own; what it got goes to ``answers``."""

    def wait() -> None:
        try:
            with slots.hold() as waited_s:
                answers.append(waited_s)
        except UnavailableError as error:
            answers.append(error)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread


def test_a_request_waiting_in_line_at_the_stop_is_refused_then() -> None:
    """Every slot is held (a plan runs); the request behind it is refused at the stop, not at the slot."""
    slots, answers = PlanSlots(1, timeout_s=QUEUE_TIMEOUT_S), list[BaseException | float]()
    with slots.hold():
        waiting = _in_line(slots, answers)
        slots.stop()
        waiting.join(BOUND_S)
        assert not waiting.is_alive()
    [refused] = answers
    assert isinstance(refused, UnavailableError)
    assert "replica is stopping" in str(refused)


def test_a_request_that_reaches_the_slots_after_the_stop_is_refused_with_a_slot_free() -> None:
    """Its plan would give up at its first check: it is not started."""
    slots, answers = PlanSlots(2, timeout_s=QUEUE_TIMEOUT_S), list[BaseException | float]()
    slots.stop()
    _in_line(slots, answers).join(BOUND_S)
    [refused] = answers
    assert isinstance(refused, UnavailableError)
    assert "replica is stopping" in str(refused)


def test_the_apps_stop_refuses_the_requests_waiting_for_a_slot(live_settings: Settings) -> None:
    """The app's stop (its lifespan's end: ``Startup.halt``) ends the wait in line of its context's slots."""
    app = create_app(with_settings(live_settings, plan_queue_timeout_s=QUEUE_TIMEOUT_S))
    answers: list[BaseException | float] = []
    with TestClient(app):
        slots = app.state.context.plan_slots
        held = [slots.hold() for _ in range(slots.size)]
        for slot in held:
            slot.__enter__()
        waiting = _in_line(slots, answers)
    waiting.join(BOUND_S)
    alive = waiting.is_alive()
    for slot in held:
        slot.__exit__(None, None, None)
    assert not alive
    [refused] = answers
    assert isinstance(refused, UnavailableError)
    assert "replica is stopping" in str(refused)


def _waiting(slots: PlanSlots) -> int:
    """How many requests wait on ``slots``'s condition now (its waiters: CPython's ``Condition``)."""
    return len(slots._changed._waiters)  # type: ignore[attr-defined]


def test_every_request_waiting_in_line_at_the_stop_is_refused_then() -> None:
    """Two wait behind the one slot: the stop wakes both, not one, and each is refused at once."""
    slots, answers = PlanSlots(1, timeout_s=QUEUE_TIMEOUT_S), list[BaseException | float]()
    with slots.hold():
        waiting = [_in_line(slots, answers) for _ in range(2)]
        deadline = time.monotonic() + BOUND_S
        while _waiting(slots) < 2:
            assert time.monotonic() < deadline, "the two requests did not wait in line"
            time.sleep(0.01)
        slots.stop()
        for thread in waiting:
            thread.join(BOUND_S)
        assert not any(thread.is_alive() for thread in waiting)
    assert [type(answer) for answer in answers] == [UnavailableError, UnavailableError]


def test_a_request_refused_at_the_queues_timeout_takes_no_slot_with_it() -> None:
    """Refused in line (no slot freed in its time), it took none: once the plan ahead gives its slot
    back, the next request is planned at once."""
    slots = PlanSlots(1, timeout_s=0.0)
    with slots.hold(), pytest.raises(UnavailableError, match="busy: 1 plans running"), slots.hold():
        pass
    with slots.hold() as waited_s:
        assert waited_s >= 0.0

"""Fixtures of the scheduler's tests: counting the projected-peak tests a play makes, and the give-up
tests' wall clock."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from scheduler import clock, giveup
from scheduler.admission import RunningPeak
from tests.scheduler.jumping_wall import DEADLINE, JumpingWall


@pytest.fixture
def peak_tests(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The step of every ``RunningPeak.overflow`` call made while the test runs, in order.

    The projected-peak test costs a pass over the running set, and the engines and the worker
    model skip it where it cannot change the answer; tests of those skips count what still runs.
    """
    steps: list[int] = []
    overflow = RunningPeak.overflow

    def counted(self: RunningPeak, *args: int) -> tuple[int, int] | None:
        steps.append(args[0])
        return overflow(self, *args)

    monkeypatch.setattr(RunningPeak, "overflow", counted)
    return steps


@pytest.fixture
def wall() -> Iterator[JumpingWall]:
    """The hard deadline's clock: 10 s before it until a stage jumps it 0.25 s past; the budget's clock
    frozen, so only the hard deadline can stop a stage."""
    jumping = JumpingWall(DEADLINE - 10.0, DEADLINE + 0.25)
    with clock.frozen(), giveup.reading(jumping):
        yield jumping

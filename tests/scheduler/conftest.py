"""Fixtures of the scheduler's tests: counting the projected-peak tests a play makes."""

from __future__ import annotations

import pytest

from scheduler.admission import RunningPeak


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

"""Stand-ins for the planning clock, so that budget checks become deterministic: one that advances
one second per reading (every timed step of the code under test appears to take a second), and
one that moves only when the test says so; a stage that seems to take a set time on it (for the
budget tests, an lpt phase of a second) and a count of whether a priced phase started."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from scheduler import clock


class SteppingClock:
    """``now`` advances one second each time it is read, from ``start``."""

    def __init__(self, start: float = 0.0) -> None:
        self.seconds = start

    def now(self) -> float:
        self.seconds += 1.0
        return self.seconds


class ManualClock:
    """A planning clock that moves only when the test says so (``seconds``)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def now(self) -> float:
        return self.seconds


def slow_stage(monkeypatch: pytest.MonkeyPatch, module: ModuleType, name: str, seconds: float) -> ManualClock:
    """A ``ManualClock`` as the planning clock, on which ``module.name`` (where the code under test
    looks it up) takes ``seconds`` each call, before it runs, and nothing else any time."""
    fake = ManualClock()
    monkeypatch.setattr(clock, "now", fake.now)
    original = getattr(module, name)

    def slow(*args: Any, **kwargs: Any) -> Any:
        fake.seconds += seconds
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, slow)
    return fake


def slow_lpt_phase(monkeypatch: pytest.MonkeyPatch, module: ModuleType) -> ManualClock:
    """``module.lpt_start`` seeming to take a second (``slow_stage``): the budget tests price phases
    in lpt phases, so their thresholds read as whole seconds."""
    return slow_stage(monkeypatch, module, "lpt_start", 1.0)


def count_calls(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[int]:
    """``owner.name`` (a module's function or a class's method) wrapped to append 1 to the returned
    list per call, and otherwise unchanged: whether a priced phase started at all."""
    original = getattr(owner, name)
    calls: list[int] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls

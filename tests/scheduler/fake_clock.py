"""Stand-ins for the planning clock, so that budget checks become deterministic: one that advances
one second per reading (every timed step of the code under test appears to take a second), and
one that moves only when the test says so."""

from __future__ import annotations


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

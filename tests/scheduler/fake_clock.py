"""A stand-in for a clock that advances one second per reading, so that every timed step of the
code under test appears to take a second and budget checks become deterministic."""

from __future__ import annotations


class SteppingClock:
    """``now`` advances one second each time it is read, from ``start``."""

    def __init__(self, start: float = 0.0) -> None:
        self.seconds = start

    def now(self) -> float:
        self.seconds += 1.0
        return self.seconds

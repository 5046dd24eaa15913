"""The caller's hard deadline on a wall clock the test moves: the give-up tests' clock.

One copy for the give-up tests (``test_giveup*.py``), whose fixture ``wall`` (tests/scheduler/conftest.py)
reads it, and whose stages jump it past the deadline with ``jump_in``: four modules had each written the
fixture again and three a stage that jumps it after so many calls (duplicates --change, tidy51).
"""

from __future__ import annotations

from types import ModuleType

import pytest

DEADLINE = 100.0  # the caller's, on the test's wall clock


class JumpingWall:
    """A wall clock that reads ``before`` until a chosen stage runs, then ``after``."""

    def __init__(self, before: float, after: float) -> None:
        self.seconds, self.after = before, after

    def __call__(self) -> float:
        return self.seconds

    def jump_in(
        self, monkeypatch: pytest.MonkeyPatch, module: ModuleType, name: str, after: int = 0
    ) -> list[int]:
        """``module.name`` (where its stage looks it up) takes the wall past the deadline when it runs,
        from its call after the first ``after`` on; the list returned gets a 1 a call (how far the stage
        went before it gave up)."""
        original = getattr(module, name)
        calls: list[int] = []

        def slow(*args: object, **kwargs: object) -> object:
            calls.append(1)
            if len(calls) > after:
                self.seconds = self.after
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, slow)
        return calls

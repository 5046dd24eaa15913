"""The exit guard's status holds when its bound passes during the interpreter's exit: the process
ends with ``FORCED_STATUS`` once the guard has fired, and a guard that has not fired by the exit's
last wait ends nothing.

The interpreter's exit runs its ``atexit`` hooks, then finalizes, and from there a daemon (the guard)
can no longer run. The guard's hook ran first, before the service's own waits (``GIVEN_UP``,
``TAKE_BACKS``, ``AFTER_PUBLISH``): a guard that fired during one of them, or whose last act let the
main thread go on, lost the race to the finalization, and the process ended 0, a stop in order
(review50c: "a window of milliseconds"). ``guard_teardown_child`` makes it wide: the guard fires
during a wait, which then ends at once, while the guard's last act runs on. No duration is asserted.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from service.api import exit_guard
from service.api.exit_guard import EXIT_LOG, FORCED_STATUS
from tests.service.api.child_module import run_child

WAIT_S = 90.0  # a bound against never: the child ends within its guard's last acts


def test_a_guard_that_fires_during_the_exits_waits_ends_the_process_with_its_status() -> None:
    child = run_child("tests.service.api.guard_teardown_child", timeout_s=WAIT_S)
    assert EXIT_LOG in child.stderr, child.stderr  # the guard fired during the wait
    assert child.returncode == FORCED_STATUS, child.stderr


def test_a_guard_not_fired_by_the_exits_last_wait_ends_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its status is decided once: the exit's waits ended within the bound, so a guard that wakes
    after them (it cannot, in the finalization) would not turn that exit into a forced one."""
    ended: list[int] = []
    monkeypatch.setattr(exit_guard, "time", SimpleNamespace(sleep=lambda _: None))
    monkeypatch.setattr(exit_guard, "os", SimpleNamespace(_exit=ended.append))
    monkeypatch.setattr(exit_guard, "_armed", None)
    monkeypatch.setattr(exit_guard, "_exited", False)
    monkeypatch.setattr(exit_guard, "_fired", threading.Event())
    exit_guard._at_the_exits_end()
    exit_guard._end_after(5.0)
    assert (ended, exit_guard._fired.is_set()) == ([], False)

"""A stop signal that lands in the interpreter's finalization, once the exit's status is decided,
leaves that status as it is: no third signal turns a decided exit into a death by the signal.

After its ``atexit`` hooks the interpreter restores the default action of every signal it handled and
clears its modules (tens to hundreds of ms for ``serve``'s). A third stop signal there killed
``serve`` by it, -15 (143) or -2 (130), where the third is documented to force 70 and an exit decided
already (``exit_guard._at_the_exits_end``) to end as decided (exit54). ``finalizing_child`` lands
the third there every time, from an object collected as the modules are cleared; no duration is
asserted.
"""

from __future__ import annotations

import signal

import pytest

from service.api import exit_guard
from service.api.exit_guard import SIGNALLED_LOG
from service.cli import SECOND_SIGNAL_LOG
from tests.service.api.child_module import run_child
from tests.service.api.finalizing_child import ALIVE

WAIT_S = 90.0  # a bound against never: the child exits as soon as it has finalized


@pytest.mark.parametrize("third", [signal.SIGTERM, signal.SIGINT], ids=lambda sig: sig.name)
def test_a_third_signal_in_the_finalization_leaves_the_decided_status(third: signal.Signals) -> None:
    child = run_child("tests.service.api.finalizing_child", third.name, timeout_s=WAIT_S)
    # the third landed where Python handles the signal no more (its handler gone), and the child lived
    assert (child.returncode, child.stdout.splitlines()) == (0, [f"{ALIVE} None"]), child.stderr
    assert child.stderr.count(SECOND_SIGNAL_LOG) == 1, child.stderr  # the second, during a wait
    assert SIGNALLED_LOG not in child.stderr, child.stderr  # the decided exit was not forced


def test_an_exit_whose_guard_is_not_enabled_leaves_the_signals_as_they_were(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A process that is no ``serve`` (a test's, an app run by ``TestClient``) keeps its own handlers
    to its end: its Ctrl-C still interrupts its exit."""
    monkeypatch.setattr(exit_guard, "_enabled", False)
    monkeypatch.setattr(exit_guard, "_exited", False)
    monkeypatch.setattr(exit_guard, "_after_the_waits", [])
    monkeypatch.setattr(exit_guard, "_deadline", None)
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        exit_guard._at_the_exits_end()
        assert {signum: signal.getsignal(signum) for signum in before} == before
    finally:  # this test's process keeps its handlers whatever the guard did
        for signum, handler in before.items():
            signal.signal(signum, handler)

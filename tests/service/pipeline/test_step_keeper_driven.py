"""A step keeper made with ``ticks_itself=False`` starts no thread: only its owner's ``tick`` calls
extend what it keeps (the ``driven_keeper`` fixture of the tests that count what one tick sends, where
the thread's own tick, a quarter margin after the first ``hold``, was counted with theirs: flaky62).
Mutation testing (helper mutants63): no test held that such a keeper starts none."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import cast

from service.context import Context
from service.pipeline.step_keeper import InFlight, StepKeeper

CTX = cast(Context, SimpleNamespace())  # never read: nothing ticks in this test


def test_a_keeper_that_does_not_tick_itself_keeps_what_it_holds_without_a_thread(
    driven_keeper: StepKeeper,
) -> None:
    before = set(threading.enumerate())
    driven_keeper.hold(CTX, InFlight("s", "first"), life_s=60.0)
    driven_keeper.hold(CTX, InFlight("s", "second"), life_s=60.0)
    assert driven_keeper.held() == 2
    assert driven_keeper._thread is None  # the keeper's own record of its thread: none started
    assert set(threading.enumerate()) <= before
    assert driven_keeper.let_go_all() == 2
    assert driven_keeper.settle(0.0)  # nothing kept, no thread to end

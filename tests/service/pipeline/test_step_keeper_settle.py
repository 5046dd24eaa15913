"""An app's stop ends the step keeper's thread (``StepKeeper.settle``) at once where it keeps nothing,
and as the last request that outlived the stop lets go otherwise, not at its next tick (15 s): its
thread had outlived every app a test process stopped (threads61). No tick runs in these tests: a
hold's first tick is 15 s after it."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import cast

from service.context import Context
from service.pipeline.step_keeper import InFlight, StepKeeper

CTX = cast(Context, SimpleNamespace())  # never read: no tick comes within the test
FIRST, SECOND = InFlight("s", "first"), InFlight("s", "second")


def _thread(keeper: StepKeeper, kept: InFlight) -> threading.Thread:
    keeper.hold(CTX, kept, life_s=60.0)
    thread = keeper._thread
    assert thread is not None
    return thread


def test_a_keeper_that_keeps_nothing_ends_its_thread_at_the_settle(keeper: StepKeeper) -> None:
    thread = _thread(keeper, FIRST)
    keeper.let_go(FIRST)
    assert keeper.settle(5.0)
    assert not thread.is_alive()


def test_a_keeper_settled_while_it_keeps_ends_its_thread_at_the_last_let_go(keeper: StepKeeper) -> None:
    thread = _thread(keeper, FIRST)
    keeper.hold(CTX, SECOND, life_s=60.0)
    assert not keeper.settle(0.0)  # a request outlived the stop
    keeper.let_go(FIRST)
    assert thread.is_alive()
    keeper.let_go(SECOND)
    thread.join(5.0)
    assert not thread.is_alive()


def test_a_hold_after_the_settled_thread_ended_starts_one_that_ticks_on(keeper: StepKeeper) -> None:
    first = _thread(keeper, FIRST)
    keeper.let_go(FIRST)
    keeper.settle(5.0)
    second = _thread(keeper, SECOND)
    assert second is not first
    second.join(0.2)
    assert second.is_alive()


def test_letting_go_of_all_ends_a_settled_thread_and_says_how_many(keeper: StepKeeper) -> None:
    # What the keeper fixture does at a test's end, through a public call: it had cleared the
    # keeper's private ``_held`` under its ``_lock``.
    thread = _thread(keeper, FIRST)
    keeper.hold(CTX, SECOND, life_s=60.0)
    assert not keeper.settle(0.0)  # two kept: the thread ticks on
    assert keeper.let_go_all() == 2
    assert keeper.held() == 0
    thread.join(5.0)
    assert not thread.is_alive()  # woken as the last let_go wakes it
    assert keeper.let_go_all() == 0

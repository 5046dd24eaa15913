"""An app's stop ends the step keeper's thread (``StepKeeper.settle``) at once where it keeps nothing,
and as the last request that outlived the stop lets go otherwise, not at its next tick (15 s): its
thread had outlived every app a test process stopped (threads61). No tick runs in these tests (a
hold's first tick is 15 s after it) but one woken early, and that one only counted. A keeper not
settled ticks on after its last let go, and a wake that finds a request kept ticks once (mutants62)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import cast

import pytest

from service.context import Context
from service.pipeline.step_keeper import InFlight, StepKeeper

CTX = cast(Context, SimpleNamespace())  # never read: no tick comes within the test
FIRST, SECOND = InFlight("s", "first"), InFlight("s", "second")
IDLE_S = 0.5  # after a let go: far less than a tick (15 s)
SETTLE_S = 5.0  # what a stop may give the keeper
LONG_S = 60.0  # a settle's timeout far past any wait it should make: one that waits it out fails


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


def test_a_keeper_not_settled_keeps_its_thread_past_the_last_let_go(keeper: StepKeeper) -> None:
    """A serving replica's keeper ticks on after its last request lets go (until a tick finds it
    idle), so the next request's hold finds a thread running rather than starting one: only a
    ``settle`` (the app's stop) ends it at the let go."""
    thread = _thread(keeper, FIRST)
    keeper.let_go(FIRST)
    thread.join(IDLE_S)
    assert thread.is_alive()


def test_a_settle_while_a_request_still_keeps_returns_at_once(keeper: StepKeeper) -> None:
    """Where a request outlived the stop, the thread ends at its let go: the app's stop does not
    wait for it, and goes on to close what it closes with the time it has left."""
    _thread(keeper, FIRST)
    started = time.monotonic()
    assert not keeper.settle(SETTLE_S)
    assert time.monotonic() - started < SETTLE_S / 2


def test_a_wake_that_finds_a_request_kept_ticks_once_then_waits_its_tick(
    keeper: StepKeeper, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hold can land between a settle's wake and the thread's look (another app's request, in a
    process that runs several): the thread finds something kept, ticks, and waits for its next tick
    as before, rather than finding the wake still set and ticking on in a loop."""
    ticks: list[float] = []
    monkeypatch.setattr(keeper, "tick", lambda: ticks.append(time.monotonic()))
    thread = _thread(keeper, FIRST)
    keeper._wake.set()  # the settle's wake, as the hold that came after it found the thread alive
    thread.join(IDLE_S)
    assert thread.is_alive()
    assert len(ticks) == 1


class _PausedWake(threading.Event):
    """The keeper's wake, whose thread, once woken, stops between its wake and its look at what is
    kept until the test lets it go on: where a hold lands in that window, deterministically."""

    def __init__(self) -> None:
        super().__init__()
        self.woken = threading.Event()  # the thread is between its wake and its look
        self.go_on = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        woke = super().wait(timeout)
        if woke and not self.go_on.is_set():
            self.woken.set()
            self.go_on.wait(SETTLE_S)
        return woke


def test_a_hold_between_the_settles_wake_and_the_threads_look_ends_the_settle_at_once(
    keeper: StepKeeper,
) -> None:
    """The settle woke the idle thread and waited for it to end; a hold (another app's request, in a
    process that runs several) landed before the thread looked, so it found something kept and ticked
    on, and the settle waited its whole timeout for a thread that was never to end then (an app's stop
    held that long: edges63). It returns at that hold now, as a settle that finds one kept does."""
    wake = _PausedWake()
    keeper._wake = wake
    thread = _thread(keeper, FIRST)
    keeper.let_go(FIRST)
    settled: list[bool] = []
    settling = threading.Thread(target=lambda: settled.append(keeper.settle(60.0)), daemon=True)
    settling.start()
    assert wake.woken.wait(SETTLE_S)  # the settle woke the thread; it has not looked yet
    keeper.hold(CTX, SECOND, life_s=60.0)  # finds the thread alive: starts none
    settling.join(SETTLE_S)
    still_waiting = settling.is_alive()
    wake.go_on.set()  # the thread looks, finds SECOND kept and ticks on
    assert not still_waiting, "the settle waited on a thread that keeps a request"
    assert settled == [False]
    keeper.let_go(SECOND)  # the last let go after a settle: the thread ends
    thread.join(SETTLE_S)
    assert not thread.is_alive()
    settling.join(SETTLE_S)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # its death is the point
def test_a_thread_that_dies_of_a_base_exception_while_a_settle_waits_ends_the_wait(
    keeper: StepKeeper, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last let go landed while the thread ticked, the settle then waited for it to end, and the
    tick raised a ``SystemExit`` (``_run`` lets it end the thread). The settle returns as the thread
    dies, as its join did before edges63: waiting on a condition nothing told, it waited out its whole
    timeout for a thread already gone (review64)."""
    ticking, go_on = threading.Event(), threading.Event()

    def fatal_tick() -> None:
        ticking.set()
        go_on.wait(SETTLE_S)
        raise SystemExit("a tick's fatal error")

    monkeypatch.setattr(keeper, "tick", fatal_tick)
    thread = _thread(keeper, FIRST)
    keeper._wake.set()  # an early tick, as a settle's wake that found FIRST kept
    assert ticking.wait(SETTLE_S)
    keeper.let_go(FIRST)  # the last let go, mid-tick
    settled: list[bool] = []
    settling = threading.Thread(target=lambda: settled.append(keeper.settle(60.0)), daemon=True)
    settling.start()
    while not keeper._settling:
        time.sleep(0.001)
    with keeper._lock:  # held by the settle from its flag to its wait: it is waiting now
        pass
    go_on.set()
    thread.join(SETTLE_S)
    assert not thread.is_alive()
    settling.join(SETTLE_S)
    still_waiting = settling.is_alive()
    with keeper._lock:  # a settle left waiting (before the fix) is let go, not left to its 60 s
        keeper._changed.notify_all()
    assert not still_waiting, "the settle waited on a thread already ended"
    assert settled == [True]


def test_a_settle_returns_as_the_thread_lets_go_not_at_its_timeout(
    keeper: StepKeeper, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The woken thread that finds nothing kept gives up its place and tells the settle, which then
    waits only for it to be gone: not for the whole timeout an app's stop allows. Here the thread is
    slow to be gone (a loaded host) after it gave up its place: the settle still returns as it ends."""
    run = keeper._run

    def slow_to_be_gone() -> None:
        run()
        time.sleep(IDLE_S)

    monkeypatch.setattr(keeper, "_run", slow_to_be_gone)
    thread = _thread(keeper, FIRST)
    keeper.let_go(FIRST)
    started = time.monotonic()
    assert keeper.settle(LONG_S)
    assert time.monotonic() - started < LONG_S / 2
    assert not thread.is_alive()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # its death is the point
def test_a_settle_after_the_thread_died_of_a_base_exception_says_none_runs_at_once(
    keeper: StepKeeper, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``BaseException`` (a ``SystemExit`` in a tick; ``_run`` catches ``Exception``) ends the thread
    with its place still taken (``hold`` starts another). A settle then finds no thread to wait for:
    it says none runs, at once, rather than waiting out its timeout for an end no one will tell."""

    def fatal() -> None:
        raise SystemExit("a tick's fatal error")

    monkeypatch.setattr(keeper, "tick", fatal)
    thread = _thread(keeper, FIRST)
    keeper._wake.set()  # it looks now, finds FIRST kept, and its tick raises
    thread.join(SETTLE_S)
    assert not thread.is_alive()
    keeper.let_go(FIRST)
    started = time.monotonic()
    assert keeper.settle(LONG_S)
    assert time.monotonic() - started < LONG_S / 2


def test_a_base_exception_that_ends_the_thread_goes_on_to_threadings_excepthook(
    keeper: StepKeeper, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The thread frees its place and tells a settle, then lets the error go on: it dies of it, and
    threading's excepthook hears it as it hears any thread's death (a ``KeyboardInterrupt``'s
    traceback printed), rather than the keeper swallowing an error it does not handle."""
    heard: list[type[BaseException] | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: heard.append(args.exc_type))

    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(keeper, "tick", interrupted)
    thread = _thread(keeper, FIRST)
    keeper._wake.set()  # it looks now, finds FIRST kept, and its tick raises
    thread.join(SETTLE_S)
    assert not thread.is_alive()
    assert keeper._thread is None
    assert heard == [KeyboardInterrupt]
    keeper.let_go(FIRST)

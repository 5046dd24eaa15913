"""An abandoned ``QuietPool`` (Ctrl-C in ``replay``) leaves nothing running for interpreter exit to race,
and a Ctrl-C is never lost on the parent's side: not while a worker is spawned, not where Python
drops its KeyboardInterrupt, not where another thread took the signal (replay61)."""

from __future__ import annotations

import multiprocessing
import signal
import threading
import time
import weakref
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures.process import _ExecutorManagerThread

import pytest

from service.interrupts import (
    QuietPool,
    children_ignore_sigint,
    quiet_pool,
    raise_if_interrupted,
    remembered_sigint,
    wait_first,
)
from tests.fresh_interpreter import in_fresh_interpreter
from tests.service.interrupt import handlers_kept

LOADED_HOST_DELAY_S = 0.3  # how late the manager thread tidies up when the host's cores are busy
SPAWN_S = 0.05  # a worker's fork and exec, as long as the Ctrl-C may arrive inside the block
PLAN_S = 10.0  # a plan the main thread waits on: far longer than a Ctrl-C may take to be raised
ASLEEP_S = 0.5  # when the Ctrl-C is sent, the main thread waiting by then
PROMPT_S = 2.0  # a Ctrl-C raised within this after it was sent counts as at once (waits poll every 0.2 s)


@pytest.fixture(autouse=True)
def python_sigint() -> Iterator[None]:
    """Python's own Ctrl-C handler, as in a terminal, whatever the test runner installed (an xdist
    worker may ignore SIGINT), put back afterwards, once the test is shown to leave no Ctrl-C behind
    for the worker's next tests (``_nothing_left``)."""
    with handlers_kept([signal.SIGINT]):
        signal.signal(signal.SIGINT, signal.default_int_handler)
        yield
        _nothing_left()


def _nothing_left() -> None:
    """No Ctrl-C a test sent outlives it: SIGINT is not left blocked, one still pending is handled now
    by the test's own handler (``pthread_sigmask`` runs pending handlers), and none is remembered
    for a later wait to raise (sigint62)."""
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    try:
        raise_if_interrupted()
    except KeyboardInterrupt:
        pytest.fail("a Ctrl-C is still remembered after its block ended")


def _managers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if isinstance(t, _ExecutorManagerThread)]


def test_abandon_returns_only_once_the_pools_manager_thread_is_done(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its manager thread closes a pipe that interpreter exit writes to, unordered before CPython
    3.12.8: still running when an interrupted ``replay`` exits, it raced the exit and Ctrl-C printed
    a "Bad file descriptor" traceback. Here it is slowed down as on a loaded host."""
    tidy_up = _ExecutorManagerThread.join_executor_internals

    def late_tidy_up(self: _ExecutorManagerThread) -> None:
        time.sleep(LOADED_HOST_DELAY_S)
        tidy_up(self)

    monkeypatch.setattr(_ExecutorManagerThread, "join_executor_internals", late_tidy_up)
    pool = QuietPool(1)
    pool.submit(time.sleep, 30.0)
    assert _managers()
    pool.abandon()
    assert not _managers()


def _ctrl_c_during_a_spawn() -> None:
    with children_ignore_sigint():
        signal.raise_signal(signal.SIGINT)
        time.sleep(SPAWN_S)


def test_a_ctrl_c_while_a_worker_is_spawned_is_raised_once_the_spawn_is_done() -> None:
    """The spawn block ignored SIGINT, and a Ctrl-C that arrived then (up to ~90 ms per worker on a
    loaded host) was dropped: the replay ran on. It is deferred to the block's end now."""
    with pytest.raises(KeyboardInterrupt):
        _ctrl_c_during_a_spawn()


def first_spawn_in_the_block() -> int | None:
    """The exit code of this interpreter's first spawned process, started in the spawn block, which
    signals itself SIGINT first thing (before any ``ignore_sigint``); Python's own handler here, as
    from a terminal (a parent that ignores SIGINT would hand that on, and the check would be moot)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    spawn = multiprocessing.get_context("spawn")
    process = spawn.Process(target=signal.raise_signal, args=(signal.SIGINT,))
    with children_ignore_sigint():
        process.start()
    process.join(30)
    return process.exitcode


def test_a_process_started_in_the_spawn_block_is_deaf_to_a_ctrl_c_before_it_ignores_one() -> None:
    """What the block is for: a Ctrl-C reaching a worker during its start ends it with no
    KeyboardInterrupt traceback (exit 0). In a fresh interpreter, so that it is the first process
    spawned: that one starts multiprocessing's resource tracker, whose start unblocked SIGINT inside
    the block, and the worker heard it (exit 1). In-process, the test passed only where an earlier
    test had started the tracker (mutants62: it failed run alone, or first on its xdist worker)."""
    assert in_fresh_interpreter(first_spawn_in_the_block) == 0


def _ctrl_c_on_collection(_ref: object) -> None:
    signal.raise_signal(signal.SIGINT)  # its handler runs here: the KeyboardInterrupt is dropped


def _ctrl_c_dropped() -> None:
    """A Ctrl-C whose KeyboardInterrupt Python drops: raised in a weakref callback, it is printed as
    "Exception ignored" and goes no further."""
    target = Future[None]()
    ref = weakref.ref(target, _ctrl_c_on_collection)
    del target  # the callback runs, and its KeyboardInterrupt does not get out
    assert ref() is None


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_ctrl_c_python_dropped_in_a_weakref_callback_is_raised_by_the_next_wait() -> None:
    """Raised inside a weakref callback (an import's module-lock one, in the replay that ran on),
    a KeyboardInterrupt is printed as "Exception ignored" and dropped."""
    done: Future[None] = Future()
    done.set_result(None)
    with remembered_sigint():
        _ctrl_c_dropped()
        with pytest.raises(KeyboardInterrupt):
            wait_first([done], block=True)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_ctrl_c_python_dropped_after_the_pools_last_wait_is_raised_as_its_block_ends() -> None:
    """No wait comes after the last job is collected: a Ctrl-C dropped then was forgotten with the
    block, and the replay went on to print its report as if never interrupted (review62)."""
    with pytest.raises(KeyboardInterrupt), quiet_pool(1):
        _ctrl_c_dropped()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_ctrl_c_raised_in_its_block_is_forgotten_as_the_block_ends() -> None:
    """Remembered in one pool's block and raised there, a Ctrl-C is not raised again by a wait after
    it (a replay's next pool, or the next test in the worker), and SIGINT's handler is as found."""
    found = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt), quiet_pool(1):
        _ctrl_c_dropped()
    assert signal.getsignal(signal.SIGINT) is found
    _nothing_left()  # fails the test where the wait below would interrupt the whole run
    done: Future[None] = Future()
    done.set_result(None)
    assert wait_first([done], block=True) == {done}


def _ctrl_c_to_this_thread(after_s: float) -> None:
    time.sleep(after_s)  # the main thread is asleep in its wait by then
    signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # as the kernel may pick any thread


def test_a_ctrl_c_another_thread_took_wakes_the_main_thread_waiting_on_a_plan() -> None:
    """Python runs the handler only in the main thread; asleep on a lock, it is not woken by a
    signal another thread took, and one wait for the first plan slept until the plan was done."""
    release = threading.Event()
    with remembered_sigint(), ThreadPoolExecutor(2) as pool:
        plan = pool.submit(release.wait, PLAN_S)
        started = time.monotonic()
        pool.submit(_ctrl_c_to_this_thread, ASLEEP_S)
        try:
            with pytest.raises(KeyboardInterrupt):
                wait_first([plan], block=True)
        finally:
            release.set()
    assert time.monotonic() - started < ASLEEP_S + PROMPT_S

"""What ``remembered_sigint`` leaves of the process's own Ctrl-C handling, and that ``quiet_pool``
remembers: a Ctrl-C in the block still reaches the handler the command had (remembered too), one a
background job ignores stays ignored, the handler is put back on the way out, a Ctrl-C answered in
one block is not raised again after it, and the replay's pool remembers one Python dropped. And a
Ctrl-C another thread took while a worker was spawned is raised once the spawn is done. Nested, an
inner block is the outer's own: it had cleared what was remembered as it started and as it ended, so a
Ctrl-C Python dropped before or inside it was forgotten and the command ran on (edges63).

Round 61's tests drove the block only with Python's own handler, inside it, with ``remembered_sigint``
called directly: each of these could change unseen (mutants62).
"""

from __future__ import annotations

import os
import select
import signal
import socket
import threading
import time
import weakref
from collections.abc import Iterator
from concurrent.futures import Future
from types import FrameType

import pytest

from service.interrupts import (
    children_ignore_sigint,
    quiet_pool,
    raise_if_interrupted,
    remembered_sigint,
    wait_first,
)
from tests.service.interrupt import handlers_kept


@pytest.fixture(autouse=True)
def python_sigint() -> Iterator[None]:
    """Python's own Ctrl-C handler, as in a terminal, whatever the test runner installed (an xdist
    worker may ignore SIGINT), put back afterwards."""
    with handlers_kept([signal.SIGINT]):
        signal.signal(signal.SIGINT, signal.default_int_handler)
        yield


def _ctrl_c() -> bool:
    """Send this process a Ctrl-C; whether a KeyboardInterrupt came of it (caught here, so that a
    wrong one fails the test rather than ending the test run)."""
    try:
        signal.raise_signal(signal.SIGINT)
    except KeyboardInterrupt:
        return True
    return False


def _remembered() -> bool:
    """Whether a Ctrl-C is remembered now (``raise_if_interrupted`` raises)."""
    try:
        raise_if_interrupted()
    except KeyboardInterrupt:
        return True
    return False


SPAWN_S = 0.05  # a worker's fork and exec, as long as the Ctrl-C may arrive inside the block
WAIT_S = 10.0  # the other thread's wait: it outlives the test


def _done() -> Future[None]:
    done: Future[None] = Future()
    done.set_result(None)
    return done


def test_a_handler_the_command_had_still_answers_a_ctrl_c_in_the_block_which_is_remembered_too() -> None:
    heard: list[int] = []

    def own(signum: int, _frame: FrameType | None) -> None:
        heard.append(signum)

    signal.signal(signal.SIGINT, own)
    with remembered_sigint():
        assert not _ctrl_c()  # the command's handler answers it, and raises nothing
        assert heard == [signal.SIGINT]
        assert _remembered()


def test_a_ctrl_c_ignored_as_in_a_background_job_stays_ignored_in_the_block() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with remembered_sigint():
        assert not _ctrl_c()
        assert not _remembered()


def test_the_handler_before_the_block_is_put_back_and_a_ctrl_c_answered_in_it_is_not_raised_after() -> None:
    with remembered_sigint():
        assert _ctrl_c()  # raised in the block, and handled there (the replay's parent leaves)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert not _remembered()
    assert wait_first([_done()], block=True)  # a later wait outside any block: nothing to raise


def _ctrl_c_on_collection(_ref: object) -> None:
    signal.raise_signal(signal.SIGINT)  # its handler runs here: the KeyboardInterrupt is dropped


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_the_replays_pool_raises_a_ctrl_c_python_dropped_at_its_next_wait() -> None:
    """``quiet_pool`` is what ``replay`` waits inside (``service.replay.harness``): a Ctrl-C dropped
    in a weakref callback there is raised by the next wait, and the pool is abandoned. By the wait
    itself, not the block's end, which raises a remembered one too (review62): the test had passed
    with ``wait_first`` raising nothing (review63)."""
    waited: list[bool] = []
    with pytest.raises(KeyboardInterrupt):
        _a_pools_wait_after_a_dropped_ctrl_c(waited)
    assert waited == []


def _a_pools_wait_after_a_dropped_ctrl_c(waited: list[bool]) -> None:
    with quiet_pool(1):
        target = Future[None]()
        ref = weakref.ref(target, _ctrl_c_on_collection)
        del target  # the callback runs, and its KeyboardInterrupt does not get out
        assert ref() is None
        wait_first([_done()], block=True)
        waited.append(True)  # the wait returned: only the block's end raised


def test_a_ctrl_c_another_thread_took_during_a_spawn_is_raised_once_the_spawn_is_done() -> None:
    """The block blocks SIGINT in the spawning thread only: a Ctrl-C to the process (a terminal's)
    goes to a thread that does not block it (the pool's manager, LightGBM's), and Python runs the
    handler in the main thread, inside the block, where it is only recorded. Nothing is pending at
    the block's end, so what was recorded must be raised there, or the replay runs on."""
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, args=(WAIT_S,), name="takes-the-signal")
    other.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            _a_process_ctrl_c_during_a_spawn()
    finally:
        stop.set()
        other.join()


def _a_process_ctrl_c_during_a_spawn() -> None:
    """A Ctrl-C to the process inside the block, which returns once a thread took it (the wakeup fd
    is written by the C-level handler, in that thread): the main thread's handler runs next, still
    in the block, however late a loaded host schedules the other thread."""
    taken, wakeup = socket.socketpair()
    wakeup.setblocking(False)
    before = signal.set_wakeup_fd(wakeup.fileno(), warn_on_full_buffer=False)
    try:
        with children_ignore_sigint():
            os.kill(os.getpid(), signal.SIGINT)  # the process's, not this thread's: the other takes it
            assert select.select([taken], [], [], WAIT_S)[0], "no thread took the Ctrl-C"
            time.sleep(SPAWN_S)
    finally:
        signal.set_wakeup_fd(before)
        taken.close()
        wakeup.close()


def test_a_ctrl_c_dropped_before_an_inner_block_is_remembered_through_it() -> None:
    with remembered_sigint():
        assert _ctrl_c()
        with remembered_sigint():
            assert _remembered()
        assert _remembered()
    assert not _remembered()


def test_a_ctrl_c_dropped_in_an_inner_block_is_remembered_by_the_outer_after_it() -> None:
    with remembered_sigint():
        with remembered_sigint():
            assert _ctrl_c()
        assert _remembered()
    assert not _remembered()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_the_inner_block_still_raises_a_ctrl_c_and_the_handler_is_put_back_once() -> None:
    with remembered_sigint():
        handler = signal.getsignal(signal.SIGINT)
        with remembered_sigint():
            assert _ctrl_c()
            assert signal.getsignal(signal.SIGINT) is handler
        assert signal.getsignal(signal.SIGINT) is handler
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

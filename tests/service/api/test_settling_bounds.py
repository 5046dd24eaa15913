"""``Settling``'s bound: how long a stop waits (at exit, naming none) is the longest command timeout
named so far, whichever thread named it last."""

from __future__ import annotations

import threading

import pytest

from service.api.settling import Settling

WAIT_S = 30.0  # a bound against never: a blocked thread waits this long at most


def test_a_later_thread_naming_a_shorter_timeout_leaves_the_longest_one_waited() -> None:
    settling = Settling("test threads")
    settling.start(lambda: None, "long", bound_s=5.0)
    settling.start(lambda: None, "short", bound_s=0.5)
    assert settling.bound_s == 5.0
    assert settling.settle() == 0  # both ended: nothing cut
    assert settling.bound_s == 5.0


def test_a_settle_naming_a_shorter_timeout_still_waits_the_longest_one_named() -> None:
    """The thread ends once let go, shortly after the settle began: waited for, none is cut."""
    settling, go = Settling("test threads"), threading.Event()

    def blocked() -> None:
        go.wait(WAIT_S)

    settling.start(blocked, "blocked", bound_s=WAIT_S)
    threading.Timer(0.2, go.set).start()
    assert settling.settle(0.0) == 0


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_thread_that_raised_has_ended_and_is_not_waited_for() -> None:
    settling = Settling("test threads")

    def raising() -> None:
        raise RuntimeError("a bug in a take-back")

    settling.start(raising, "raising", bound_s=WAIT_S)
    assert settling.settle() == 0  # ended, however it ended: nothing to cut


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_work_handed_on_that_raised_has_ended_and_is_not_waited_for() -> None:
    settling = Settling("test threads")

    def raising() -> None:
        raise RuntimeError("a bug in a take-back")

    thread = threading.Thread(target=settling.handed_on(raising))
    thread.start()
    thread.join(WAIT_S)
    assert settling.settle(WAIT_S) == 0  # ended, however it ended: nothing to cut

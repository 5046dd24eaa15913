"""``remembered_sigint`` nested: a Ctrl-C heard in either block is remembered until the outer one ends.

An inner block cleared what was remembered as it started and as it ended, so a Ctrl-C Python dropped
in the outer block before it (a weakref callback's, a finalizer's) was forgotten, and one dropped in
the inner block was forgotten at its end: the outer block's ``raise_if_interrupted`` (``quiet_pool``'s
waits) raised neither, and the command ran on as if never interrupted (replay61's fault, again).
Nothing nests today; an inner block is now the outer's own (edges63). The Ctrl-Cs here are raised and
caught by the test, as Python catches and drops one in a callback.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from service.interrupts import raise_if_interrupted, remembered_sigint
from tests.service.interrupt import handlers_kept


@pytest.fixture(autouse=True)
def python_sigint() -> Iterator[None]:
    """Python's own Ctrl-C handler, as in a terminal (an xdist worker may ignore SIGINT), put back."""
    with handlers_kept([signal.SIGINT]):
        signal.signal(signal.SIGINT, signal.default_int_handler)
        yield


def _dropped_ctrl_c() -> None:
    """A Ctrl-C whose KeyboardInterrupt does not get out, as in a callback Python drops it from."""
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)


def _remembered() -> bool:
    """Whether a Ctrl-C is remembered now (``raise_if_interrupted`` raises)."""
    try:
        raise_if_interrupted()
    except KeyboardInterrupt:
        return True
    return False


def test_a_ctrl_c_dropped_before_an_inner_block_is_remembered_through_it() -> None:
    with remembered_sigint():
        _dropped_ctrl_c()
        with remembered_sigint():
            assert _remembered()
        assert _remembered()
    assert not _remembered()


def test_a_ctrl_c_dropped_in_an_inner_block_is_remembered_by_the_outer_after_it() -> None:
    with remembered_sigint():
        with remembered_sigint():
            _dropped_ctrl_c()
        assert _remembered()
    assert not _remembered()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_the_inner_block_still_raises_a_ctrl_c_and_the_handler_is_put_back_once() -> None:
    with remembered_sigint():
        handler = signal.getsignal(signal.SIGINT)
        with remembered_sigint():
            _dropped_ctrl_c()
            assert signal.getsignal(signal.SIGINT) is handler
        assert signal.getsignal(signal.SIGINT) is handler
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

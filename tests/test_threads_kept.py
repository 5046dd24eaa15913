"""The guard that fails a test module whose threads outlive it (``tests.threads_kept``) names a thread
left running, and only such a thread: not one that ends within its wait, not a session fixture's, not
one of ``ALLOWED``. Each thread these tests start is stopped and joined before the test ends."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.threads_kept import ALLOWED, ThreadsLeftError, owned_by_session, threads_ended


@contextmanager
def _parked(name: str) -> Iterator[threading.Thread]:
    """A thread named ``name`` waiting until the block ends, then joined."""
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name=name, daemon=True)
    try:
        yield thread
    finally:
        stop.set()
        thread.join(5)


def test_a_thread_left_running_is_named_with_its_target() -> None:
    with (
        _parked("left-behind") as thread,
        pytest.raises(ThreadsLeftError) as raised,
        threads_ended(wait_s=0.05),
    ):
        thread.start()
    assert "left-behind (threading.Event.wait)" in str(raised.value)


def test_a_thread_that_ends_within_the_wait_is_not_named() -> None:
    ending = threading.Timer(0.05, lambda: None)
    with threads_ended(wait_s=5.0):
        ending.start()
    assert not ending.is_alive()


def test_threads_alive_before_the_module_are_not_named() -> None:
    with _parked("before") as thread:
        thread.start()
        with threads_ended(wait_s=0.05):
            pass


def test_a_session_fixture_s_thread_is_not_named() -> None:
    with _parked("the-session-s") as thread, threads_ended(wait_s=0.05), owned_by_session():
        thread.start()


def test_an_allowed_thread_is_not_named() -> None:
    (allowed,) = ALLOWED
    with _parked(allowed) as thread, threads_ended(wait_s=0.05):
        thread.start()

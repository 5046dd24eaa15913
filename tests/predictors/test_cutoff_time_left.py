"""The time its caller has left is read within ``cutoff.checking``'s context only: a wait on the way is
capped by it there (``FoldsBeside.wait_s``), and by nothing once the context ends, nor in another."""

from __future__ import annotations

import math
import threading

from predictors import cutoff


def test_the_callers_time_left_holds_within_its_context_and_none_after_it() -> None:
    outer_left, inner_left = 2.5, 0.25
    assert cutoff.time_left_s() == math.inf
    with cutoff.checking(None, lambda: outer_left):
        assert cutoff.time_left_s() == outer_left
        with cutoff.checking(None, lambda: inner_left):
            assert cutoff.time_left_s() == inner_left
        assert cutoff.time_left_s() == outer_left
    assert cutoff.time_left_s() == math.inf


def test_a_context_left_by_an_error_leaves_no_time_left_behind() -> None:
    try:
        with cutoff.checking(None, lambda: 0.5):
            raise RuntimeError("the caller's predict failed")
    except RuntimeError:
        pass
    assert cutoff.time_left_s() == math.inf


def test_another_thread_sees_no_time_left_of_this_ones_caller() -> None:
    seen: list[float] = []
    with cutoff.checking(None, lambda: 0.5):
        thread = threading.Thread(target=lambda: seen.append(cutoff.time_left_s()))
        thread.start()
        thread.join()
    assert seen == [math.inf]

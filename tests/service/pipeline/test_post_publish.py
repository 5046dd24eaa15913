"""``post_publish``: the bookkeeping after a publish, which a request's answer waits for only until the
caller's deadline; its order, its errors, and a request that fails. Plain callables stand for the
bookkeeping (Redis's own stall is ``tests/service/api/test_after_publish_stalled.py``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
import redis

from service.pipeline import post_publish
from service.pipeline.deadline import NO_DEADLINE, Deadline

WAIT_S = 30.0  # a bound against never: a blocked step waits this long at most


def _noting(done: list[str], name: str) -> Callable[[], None]:
    return lambda: done.append(name)


def _serving(done: list[str], *steps: str) -> Callable[[], str]:
    """A pipeline that queues ``steps`` as its bookkeeping, then answers."""

    def serve() -> str:
        for step in steps:
            post_publish.later(step, _noting(done, step))
        done.append("answered")
        return "answer"

    return serve


def test_without_a_deadline_the_bookkeeping_and_the_release_run_in_order_before_the_answer() -> None:
    done: list[str] = []
    answer = post_publish.bounded(_serving(done, "set", "profiles"), _noting(done, "release"), NO_DEADLINE)
    assert answer == "answer"
    assert done == ["answered", "set", "profiles", "release"]


def test_within_its_deadline_the_answer_waits_for_the_bookkeeping() -> None:
    done: list[str] = []
    deadline = Deadline(time.perf_counter() + WAIT_S)
    post_publish.bounded(_serving(done, "set"), _noting(done, "release"), deadline)
    assert done == ["answered", "set", "release"]


def test_the_answer_does_not_wait_past_the_deadline_and_the_release_follows_the_step_left_running() -> None:
    """The step blocks until the test lets it go, after the answer: waited for, it would have held
    the answer ``WAIT_S`` and the release would have run by then."""
    done: list[str] = []
    go, released = threading.Event(), threading.Event()

    def blocked() -> None:
        go.wait(WAIT_S)
        done.append("set")

    def serve() -> str:
        post_publish.later("entering the step's set", blocked)
        return "answer"

    def release() -> None:
        done.append("release")
        released.set()

    answer = post_publish.bounded(serve, release, Deadline(time.perf_counter() + 0.2))
    assert (answer, done) == ("answer", [])
    assert post_publish.settle(0.0, left_s=0.0) == 1  # one the app's stop waits for, before its pool closes
    go.set()
    assert released.wait(WAIT_S)
    assert done == ["set", "release"]


def test_a_redis_error_in_the_bookkeeping_is_logged_and_the_rest_still_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    done: list[str] = []

    def serve() -> str:
        post_publish.later("entering the step's set", _raising(redis.TimeoutError("Timeout reading")))
        post_publish.later("remembering worker profiles", _noting(done, "profiles"))
        return "answer"

    post_publish.bounded(serve, _noting(done, "release"), Deadline(time.perf_counter() + WAIT_S))
    assert done == ["profiles", "release"]
    assert "step published, but entering the step's set failed: TimeoutError" in caplog.text


def test_another_error_in_the_bookkeeping_ends_it_and_reaches_a_request_still_waiting() -> None:
    """As when the answer waited for it in line: the request fails (500), its mark taken back."""
    done: list[str] = []

    def serve() -> str:
        post_publish.later("entering the step's set", _raising(KeyError("slot")))
        post_publish.later("remembering worker profiles", _noting(done, "profiles"))
        return "answer"

    with pytest.raises(KeyError):
        post_publish.bounded(serve, _noting(done, "release"), Deadline(time.perf_counter() + WAIT_S))
    assert done == ["release"]


def test_a_request_that_fails_runs_its_bookkeeping_and_release_before_its_error_goes_up() -> None:
    """A refusal leaves Redis as it found it before it answers; bookkeeping queued before the
    failure (a publish that went out) is not dropped."""
    done: list[str] = []

    def serve() -> str:
        post_publish.later("entering the step's set", _noting(done, "set"))
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        post_publish.bounded(serve, _noting(done, "release"), Deadline(time.perf_counter() - 1.0))
    assert done == ["set", "release"]


def test_bookkeeping_outside_a_request_runs_at_once() -> None:
    done: list[str] = []
    post_publish.later("entering the step's set", _noting(done, "set"))
    assert done == ["set"]


def _raising(error: BaseException) -> Callable[[], None]:
    def raising() -> None:
        raise error

    return raising

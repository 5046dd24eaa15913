"""``post_publish``'s edges: how long an answer waits for its bookkeeping (until ``FIXED_S`` before the
caller's deadline, read on the deadline's own clock), and an error the request raises itself is not
logged a second time by the bookkeeping's thread."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from service.logs import schedule_context, schedule_id_var
from service.pipeline import post_publish
from service.pipeline.deadline import Deadline
from service.pipeline.publish_pace import FIXED_S

LEFT_S = 30.0  # what the caller's deadline leaves, on a clock that does not move


class _NotedEvent(threading.Event):
    """An event that notes the timeout each wait on it was given, and what the wait returned."""

    def __init__(self) -> None:
        super().__init__()
        self.timeouts: list[float | None] = []
        self.ends: list[bool] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.timeouts.append(timeout)
        self.ends.append(super().wait(timeout))
        return self.ends[-1]


@dataclass
class _NotedTail(post_publish._Tail):
    done: threading.Event = field(default_factory=_NotedEvent)


def test_the_answer_waits_for_the_bookkeeping_until_the_answers_own_time_before_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tails: list[_NotedTail] = []

    def noted(release: object) -> _NotedTail:
        tails.append(_NotedTail(release))  # type: ignore[arg-type]
        return tails[-1]

    monkeypatch.setattr(post_publish, "_Tail", noted)
    post_publish.bounded(lambda: "answer", lambda: None, Deadline(LEFT_S, clock=lambda: 0.0))
    (tail,) = tails
    assert isinstance(tail.done, _NotedEvent)
    assert tail.done.timeouts == [pytest.approx(LEFT_S - FIXED_S)]
    assert tail.done.ends == [True]  # woken as the bookkeeping ended, not at the wait's end


def test_an_error_that_reaches_the_waiting_request_is_not_logged_by_the_bookkeeping_thread(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def serve() -> str:
        post_publish.later("entering the step's set", _raising(KeyError("slot")))
        return "answer"

    with pytest.raises(KeyError):
        post_publish.bounded(serve, lambda: None, Deadline(LEFT_S, clock=lambda: 0.0))
    assert "bookkeeping after a published step failed" not in caplog.text


def _raising(error: BaseException) -> Callable[[], None]:
    def raising() -> None:
        raise error

    return raising


def test_bookkeeping_run_on_its_own_thread_runs_in_the_context_it_was_queued_in() -> None:
    """Its log lines carry the schedule's id, as they did in line."""
    seen: list[str | None] = []

    def serve() -> str:
        with schedule_context("step-7"):
            post_publish.later("entering the step's set", lambda: seen.append(schedule_id_var.get()))
        return "answer"

    post_publish.bounded(serve, lambda: None, Deadline(LEFT_S, clock=lambda: 0.0))
    assert seen == ["step-7"]


def test_a_failed_requests_own_error_goes_up_over_its_bookkeepings_which_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    done: list[str] = []

    def serve() -> str:
        post_publish.later("entering the step's set", _raising(KeyError("slot")))
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        post_publish.bounded(serve, lambda: done.append("release"), Deadline(LEFT_S, clock=lambda: 0.0))
    assert done == ["release"]
    assert "bookkeeping after a failed request failed" in caplog.text

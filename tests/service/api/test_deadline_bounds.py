"""The edges of the caller's deadline (``service/pipeline/deadline.py``) and of the publish pace it reserves
for (``service/pipeline/publish_pace.py``), each on a fake clock: exactly the reserve left is too little,
the header's milliseconds count from the request's arrival whatever padding they carry, and 10 digits
are still a deadline. Each test kills a mutant that survived round 46's tests (helper mutants10,
docs/experiments.md)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from service.limits import PlanSlots
from service.pipeline import deadline
from service.pipeline.deadline import Deadline
from service.pipeline.publish_pace import FIXED_S, Pace
from service.problems.table import DeadlineExceededError


def _at(now: float) -> Callable[[], float]:
    return lambda: now


def test_a_publish_left_exactly_its_reserve_is_refused() -> None:
    """The check refuses a deadline that leaves no more than the reserve: a publish begun with exactly
    that left ends as the caller stops waiting, at best."""
    with pytest.raises(DeadlineExceededError, match="left 500 ms before its publish"):
        Deadline(1.0, _at(0.5)).check("its publish", 0.5)


def test_a_deadline_reached_exactly_is_said_to_have_passed() -> None:
    """Its 504 says the deadline passed, not that it left 0 ms, less than the 0 ms needed."""
    with pytest.raises(DeadlineExceededError, match="passed before it was predicted"):
        Deadline(1.0, _at(1.0)).check("it was predicted")


def test_a_plan_left_no_room_past_its_reserve_is_refused_not_given_a_zero_budget() -> None:
    with pytest.raises(DeadlineExceededError, match="leaves less than the 500 ms"):
        Deadline(1.0, _at(0.5)).budget_s(60.0, 0.5)


def test_the_mark_s_budget_leaves_the_least_reserve_and_is_never_negative() -> None:
    """``capped_s`` is what the in-flight mark must outlive: the deadline less ``MIN_RESERVE_S``,
    zero once the deadline is past (the request is refused before it plans)."""
    assert Deadline(1.0, _at(0.0)).capped_s(60.0) == pytest.approx(1.0 - deadline.MIN_RESERVE_S)
    assert Deadline(1.0, _at(0.0)).capped_s(0.25) == 0.25
    assert Deadline(1.0, _at(2.0)).capped_s(60.0) == 0.0


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("1000", 1.0), (" 250 ", 0.25), ("0000000000001000", 1.0), ("9999999999", 9_999_999.999)],
    ids=["plain", "padded", "leading-zeros", "ten-digits"],
)
def test_the_header_s_milliseconds_count_from_the_request_s_arrival(value: str, seconds: float) -> None:
    """Counted from ``arrived`` (not from when the header is read); spaces around the number and
    zeros before it are no part of its size; 10 digits (~115 days) are still a deadline."""
    assert deadline.of(value, 5.0).at == pytest.approx(5.0 + seconds)


def test_a_duration_read_backwards_is_recorded_as_no_time() -> None:
    """A part timed on a clock read out of order (a negative duration) counts as instant, never as a
    negative pace that would shrink the reserve of every request after it."""
    pace = Pace(FIXED_S)
    pace.record(-0.2, 256)
    assert pace.paces() == (0.0,)


def test_a_deadline_at_the_queue_timeout_itself_is_the_caller_s_504() -> None:
    """The caller stops waiting no later than the queue would have refused the request: the refusal is
    its deadline's (504), not the queue's 503 that says to retry."""
    slots = PlanSlots(1, timeout_s=0.5)
    arrived = time.perf_counter() - 1.0  # both ends passed: no wait
    with slots.hold(), pytest.raises(DeadlineExceededError), slots.hold(arrived, Deadline(arrived + 0.5)):
        pass  # the first hold is a plan running

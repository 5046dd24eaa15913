"""When the planner is told to give up (``Deadline.planner_gives_up``): what the publish of the plan's
size needs before the caller's deadline, on the planner's clock (``time.perf_counter``), whatever clock
the deadline itself is read on; never without a deadline."""

from __future__ import annotations

import time

from service.pipeline.deadline import NO_DEADLINE, Deadline

LEFT_S, NEED_S = 9.0, 0.5  # what the deadline leaves, and what the publish needs


def test_the_planner_gives_up_where_only_the_publishs_need_is_left() -> None:
    before = time.perf_counter()
    with Deadline(LEFT_S, clock=lambda: 0.0).planner_gives_up(NEED_S) as give_up_at:
        after = time.perf_counter()
    assert give_up_at is not None
    assert before + LEFT_S - NEED_S <= give_up_at <= after + LEFT_S - NEED_S


def test_without_a_deadline_the_planner_is_never_told_to_give_up() -> None:
    with NO_DEADLINE.planner_gives_up(NEED_S) as give_up_at:
        assert give_up_at is None

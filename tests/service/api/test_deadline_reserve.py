"""The reserve a caller's deadline keeps for the publish (``service/pipeline/publish_pace.py``): sized
by the request's trajectories at the pace this replica's recent publishes went, where a flat 0.25 s
was too short for a 4,096 x 32 publish on a loaded host (answered after the deadline) and refused
every deadline under 250 ms (review46a). It caps the plan's budget and is what the publish check
requires left. The pace is injected (a recorded history, a fake clock): no assertion reads how fast
anything ran."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from service.context import Context
from service.pipeline import answer, deadline, stages
from service.pipeline.deadline import Deadline
from service.pipeline.publish_pace import (
    FIXED_S,
    FLOOR_TRAJECTORIES,
    HEADROOM,
    PRIOR_HANDOVER_S_PER_TRAJECTORY,
    PRIOR_PUBLISH_S_PER_TRAJECTORY,
    REMEMBERED,
    Pace,
    PublishPace,
)
from service.problems.table import DeadlineExceededError
from tests.service.api.badinput import redis_snapshot
from tests.service.api_helpers import batch_body

HEADER = deadline.HEADER
NEED = "the handover and a publish of its size need"  # the budget check's 504: the reserve it could not leave


def _at(now: float) -> Any:
    return lambda: now


def _context(client: TestClient) -> Context:
    ctx: Context = client.app.state.context  # type: ignore[attr-defined]
    return ctx


def _measured(client: TestClient, handover_s: float, publish_s: float) -> None:
    """The app's replica has met one request of 256 trajectories, its parts taking these times."""
    pace = _context(client).publish_pace
    pace.handover.record(handover_s, 256)
    pace.publish.record(publish_s, 256)


def _paced(publishes: tuple[tuple[float, int], ...], prior: float = PRIOR_PUBLISH_S_PER_TRAJECTORY) -> Pace:
    pace = Pace(prior)
    for seconds, trajectories in publishes:
        pace.record(seconds, trajectories)
    return pace


def test_before_any_request_the_reserve_is_the_prior_paces_times_the_trajectories() -> None:
    reserve = PublishPace().reserve(4096)
    assert reserve.publish_s == pytest.approx(FIXED_S + HEADROOM * PRIOR_PUBLISH_S_PER_TRAJECTORY * 4096)
    handover_s = HEADROOM * PRIOR_HANDOVER_S_PER_TRAJECTORY * 4096
    assert reserve.cap_s == pytest.approx(handover_s + reserve.publish_s)


def test_a_pace_grows_with_the_trajectories_at_the_second_slowest_remembered() -> None:
    pace = _paced(((0.1, 4096), (0.32, 4096), (0.2, 4096), (0.4, 4096)))
    assert pace.s_per_trajectory() == pytest.approx(0.32 / 4096)
    assert pace.need_s(4096) == pytest.approx(HEADROOM * 0.32)
    assert pace.need_s(1024) == pytest.approx(HEADROOM * 0.08)


def test_one_stalled_publish_is_no_pace_but_a_second_is_a_slow_spell() -> None:
    """A 1,024-trajectory publish held 0.444 s among ones of ~0.05 s: read as the pace, it reserved
    2.7 s for a 4,096-trajectory step (reserve46's first run)."""
    pace = _paced(((0.05, 1024),) * (REMEMBERED - 2) + ((0.444, 1024),))
    assert pace.s_per_trajectory() == pytest.approx(0.05 / 1024)
    pace.record(0.3, 1024)
    assert pace.s_per_trajectory() == pytest.approx(0.3 / 1024)


def test_the_one_pace_remembered_is_the_pace() -> None:
    assert _paced(((0.32, 4096),)).s_per_trajectory() == pytest.approx(0.32 / 4096)


def test_a_slow_spell_is_forgotten_after_the_last_few_faster_publishes() -> None:
    pace = _paced(((0.32, 4096),) * 2 + ((0.1, 4096),) * (REMEMBERED - 2))
    assert pace.s_per_trajectory() == pytest.approx(0.32 / 4096)
    pace.record(0.1, 4096)
    assert pace.s_per_trajectory() == pytest.approx(0.1 / 4096)


def test_a_small_publish_is_paced_as_the_floor_not_as_its_fixed_part_per_trajectory() -> None:
    """A 32-trajectory publish in 5 ms is no 0.16 ms per trajectory: read so, it would reserve ~1 s
    for the next 4,096-trajectory step."""
    pace = _paced(((0.005, 32),))
    assert pace.s_per_trajectory() == pytest.approx(0.005 / FLOOR_TRAJECTORIES)
    assert pace.need_s(32) == pace.need_s(FLOOR_TRAJECTORIES) == pytest.approx(HEADROOM * 0.005)
    assert pace.need_s(4096) == pytest.approx(HEADROOM * 0.005 * 16)


def test_the_plan_s_budget_is_capped_to_leave_the_handover_and_the_publish_of_its_size() -> None:
    """1 s left; handovers of 4,096 measured at 0.04 s, publishes at 0.32 s: the plan gets
    1 - 1.5 x 0.04 - (0.02 + 1.5 x 0.32) s, and the publish must find 0.02 + 1.5 x 0.32 s left."""
    measured = PublishPace(_paced(((0.04, 4096),)), _paced(((0.32, 4096),)))
    reserve = measured.reserve(4096)
    assert reserve.publish_s == pytest.approx(FIXED_S + HEADROOM * 0.32)
    assert Deadline(1.0, _at(0.0)).budget_s(60.0, reserve.cap_s) == pytest.approx(
        1.0 - HEADROOM * 0.04 - FIXED_S - HEADROOM * 0.32
    )
    with pytest.raises(DeadlineExceededError, match=f"leaves less than the 560 ms {NEED}"):
        Deadline(0.5, _at(0.0)).budget_s(60.0, reserve.cap_s)


def test_a_deadline_under_250_ms_plans_a_small_step_where_the_flat_reserve_refused_it() -> None:
    """A 32-trajectory step with a 10 ms budget and 200 ms left keeps its budget (the priors reserve
    ~55 ms for its handover and publish)."""
    cap_s = PublishPace().reserve(32).cap_s
    assert cap_s < 0.06
    assert Deadline(0.2, _at(0.0)).budget_s(0.01, cap_s) == 0.01
    assert Deadline(0.2, _at(0.0)).budget_s(60.0, cap_s) == pytest.approx(0.2 - cap_s)


def test_the_publish_check_requires_the_reserve_left_not_merely_a_deadline_not_passed() -> None:
    with pytest.raises(DeadlineExceededError, match="left 300 ms before its publish, less than the 500 ms"):
        Deadline(1.0, _at(0.7)).check("its publish", 0.5)
    Deadline(1.0, _at(0.7)).check("its publish", 0.2)
    Deadline().check("its publish", 1e9)  # no deadline: nothing is refused


def test_a_large_step_whose_publish_would_end_past_the_deadline_is_refused_before_it_plans(
    client: TestClient, redis_client: redis.Redis
) -> None:
    """Publishes measured at 10 s per 256 trajectories, handovers at none: a 1,024-trajectory step
    needs 60 s after its
    plan, more than its 30 s deadline (the flat 0.25 s planned it and published it past the deadline);
    a 32-trajectory one needs 15.02 s and is planned in the 14.98 s left."""
    _measured(client, handover_s=0.0, publish_s=10.0)
    before = redis_snapshot(redis_client)
    large = client.post("/schedule", json=batch_body(prompts=32, n=32), headers={HEADER: "30000"})
    assert (large.status_code, large.json()["field"]) == (504, HEADER)
    assert f"leaves less than the 60020 ms {NEED}" in large.json()["detail"]
    assert redis_snapshot(redis_client) == before
    small = client.post("/schedule", json=batch_body(time_budget_ms=60_000), headers={HEADER: "30000"})
    assert small.status_code == 200
    assert 0 < small.json()["time_budget_ms"] <= 30_000 - 15_020


def test_a_plan_reaching_its_publish_with_less_than_its_reserve_left_is_refused(
    client: TestClient, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held after its plan until less than its 1.52 s reserve is left (a state, not a guess at the
    host's speed): the publish would end past the deadline, so it is not begun."""
    _measured(client, handover_s=0.0, publish_s=1.0)
    reserve_s = _context(client).publish_pace.reserve(32).publish_s
    given: list[Deadline] = []
    of, respond = deadline.of, answer.respond  # what stages calls by its own name

    def read_back(*args: Any, **kwargs: Any) -> Deadline:
        given.append(of(*args, **kwargs))
        return given[-1]

    def short_of_the_reserve(*args: Any, **kwargs: Any) -> Any:
        while given[-1].left_s() > reserve_s:
            time.sleep(0.01)
        return respond(*args, **kwargs)

    monkeypatch.setattr(deadline, "of", read_back)
    monkeypatch.setattr(stages, "respond", short_of_the_reserve)
    before = redis_snapshot(redis_client)
    late = client.post("/schedule", json=batch_body(schedule_id="late"), headers={HEADER: "3000"})
    assert (late.status_code, late.json()["field"]) == (504, HEADER)
    assert "published" in late.json()["detail"]
    assert redis_snapshot(redis_client) == before


def test_each_published_step_records_its_paces_and_nothing_else_does(client: TestClient) -> None:
    pace = _context(client).publish_pace
    assert (pace.handover.paces(), pace.publish.paces()) == ((), ())
    assert client.post("/schedule", json=batch_body()).status_code == 200
    assert (len(pace.handover.paces()), len(pace.publish.paces())) == (1, 1)
    assert client.post("/schedule", json=batch_body(publish=False)).status_code == 200
    assert client.post("/schedule", json=batch_body(), headers={HEADER: "0"}).status_code == 504
    assert (len(pace.handover.paces()), len(pace.publish.paces())) == (1, 1)


def test_the_handover_counts_the_planner_s_overrun_and_from_a_plan_s_early_end() -> None:
    """Budget 0.1 s from 0: a plan ending at 0.5 hands over at 0.6 (0.5 s, the overrun included);
    one ending at 0.05 hands over at 0.08 (0.03 s). The publishes take 0.3 s and 0.02 s."""
    pace = PublishPace()
    for planned, publishing, published in ((0.5, 0.6, 0.9), (0.05, 0.08, 0.1)):
        reserve = pace.reserve(1024, iter((0.0, planned, publishing, published)).__next__)
        with reserve.planning(0.1):
            pass
        with reserve.publishing():
            pass
    assert pace.handover.paces() == pytest.approx((0.5 / 1024, 0.03 / 1024))
    assert pace.publish.paces() == pytest.approx((0.3 / 1024, 0.02 / 1024))

"""What the plan predicts travels with the schedule, so progress can say whether a step is late."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from redis.connection import Connection

from scheduler.errors import InvalidInputError
from scheduler.types import Plan, Trajectory, WorkerPlan
from service.delivery import Delivery, PublishOutcome
from service.delivery.publisher import publish_plan, schedule_from_plan
from service.delivery.wire import publish_args
from service.engines import SERVICE_ENGINE
from tests.service.delivery.conftest import schedule

TRAJ = tuple(Trajectory(f"p{i}", 0, 40, 4096, 100.0) for i in range(3))


def _plan(finishes: tuple[float, float] = (9.0, 8.5), makespan: float = 9.0) -> Plan:
    workers = (WorkerPlan("a", ("p0#0", "p1#0"), finishes[0]), WorkerPlan("b", ("p2#0",), finishes[1]))
    return Plan("lpt", workers, makespan, 8.0, "HEURISTIC", 0.01)


def test_progress_reads_the_publish_time_the_plans_times_and_the_time_elapsed(delivery: Delivery) -> None:
    assert publish_plan(delivery, "s", _plan(), TRAJ, engine=SERVICE_ENGINE) is PublishOutcome.CREATED
    published = delivery.info("s").published_ms
    progress = delivery.progress("s", now_ms=published + 2_500)
    assert (progress.published_ms, progress.elapsed_s) == (published, 2.5)
    assert progress.predicted_makespan_s == 9.0
    assert dict(progress.planned_finish_s) == {"a": 9.0, "b": 8.5}


def test_without_a_pinned_clock_elapsed_time_is_read_on_the_servers_clock(delivery: Delivery) -> None:
    delivery.publish(schedule("s", {"a": 1}), now_ms=1_000)  # a lease clock far behind the server's
    progress = delivery.progress("s")
    assert progress.now_ms is not None
    assert progress.now_ms > 1_700_000_000_000
    assert progress.elapsed_s == (progress.now_ms - 1_000) / 1000


def test_a_schedule_published_without_predicted_times_has_none(delivery: Delivery) -> None:
    delivery.publish(schedule("s", {"a": 2}), now_ms=1_000)
    progress = delivery.progress("s", now_ms=1_500)
    assert (progress.predicted_makespan_s, dict(progress.planned_finish_s)) == (None, {})
    assert progress.elapsed_s == 0.5


def test_predicted_times_leave_the_fingerprint_as_earlier_releases_stored_it() -> None:
    # a replay of the same plan across an upgrade must still be recognised as one, not a conflict
    plain = schedule("s", {"a": 2, "b": 1})
    timed = dataclasses.replace(plain, predicted_makespan_s=9.0, planned_finish_s={"a": 9.0, "b": 3.0})
    assert publish_args(timed, 5, nonce="n")[0] == publish_args(plain, 5, nonce="n")[0]


def test_a_replay_of_the_plan_without_its_times_is_the_same_schedule(delivery: Delivery) -> None:
    timed = schedule_from_plan("s", _plan(), TRAJ, engine=SERVICE_ENGINE)
    assert delivery.publish(timed) is PublishOutcome.CREATED
    older = dataclasses.replace(timed, predicted_makespan_s=None, planned_finish_s={})
    assert delivery.publish(older) is PublishOutcome.UNCHANGED
    assert delivery.progress("s").predicted_makespan_s == 9.0  # the first publish's stay


@pytest.mark.parametrize(
    ("makespan", "finishes", "field"),
    [
        (float("nan"), {}, "predicted_makespan_s"),
        (-1.0, {}, "predicted_makespan_s"),
        (None, {"a": float("inf")}, "planned_finish_s[a]"),
        (None, {"nobody": 1.0}, "planned_finish_s"),
    ],
)
def test_predicted_times_that_are_not_seconds_of_a_published_worker_are_refused_by_name(
    makespan: float | None, finishes: dict[str, float], field: str
) -> None:
    plain = schedule("s", {"a": 1})
    bad = dataclasses.replace(plain, predicted_makespan_s=makespan, planned_finish_s=finishes)
    with pytest.raises(InvalidInputError) as err:
        bad.validate()
    assert err.value.field == field


def test_a_makespan_that_is_not_finite_is_left_out_rather_than_refusing_the_publish() -> None:
    published = schedule_from_plan("s", _plan(makespan=float("inf")), TRAJ, engine=SERVICE_ENGINE)
    assert published.predicted_makespan_s is None
    assert dict(published.planned_finish_s) == {"a": 9.0, "b": 8.5}
    published.validate()


def test_a_progress_read_on_the_servers_clock_is_one_round_trip(
    delivery: Delivery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``GET /schedule/{id}`` polls this: the lease clock comes in the same transaction as the counts
    (on Redis Cluster too: this module is re-run there)."""
    delivery.publish(schedule("s", {"a": 1}))
    delivery.progress("s")  # connections open and scripts known: count the steady state
    sends: list[bytes] = []
    send: Any = Connection.send_packed_command  # redis-py leaves it untyped

    def counted(self: Connection, command: Any, check_health: bool = True) -> None:
        sends.append(command)
        send(self, command, check_health)

    monkeypatch.setattr(Connection, "send_packed_command", counted)
    assert delivery.progress("s").now_ms is not None
    assert len(sends) == 1

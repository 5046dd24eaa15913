"""A retrain asked for between steps fits the last step where its schedules say it is over (settled,
or each trajectory reported), and still leaves it out mid-step, on the real embedded valkey."""

from __future__ import annotations

from pathlib import Path

import redis
from fastapi.testclient import TestClient

from predictors.tracetable import Trace
from scheduler.trace import TraceRow
from service.learning.step_over import StepReports
from tests.service.api_helpers import AppFactory, actual_report
from tests.service.learning.step_two import (
    finish,
    fitted_steps,
    publish_second_part,
    publish_step_2,
    ran_and_reported,
    report,
    retrained_steps,
)


def test_a_retrain_after_the_step_settled_fits_it(
    client: TestClient, redis_client: redis.Redis, tmp_path: Path
) -> None:
    ran_and_reported(client, redis_client, "step-2")
    assert retrained_steps(client, tmp_path) == [0, 1, 2]


def test_a_retrain_mid_step_leaves_it_out(
    client: TestClient, redis_client: redis.Redis, tmp_path: Path
) -> None:
    leases = publish_step_2(client, redis_client, "step-2")
    finish(redis_client, leases[:16])
    report(client, leases[:16], "step-2")
    assert retrained_steps(client, tmp_path) == [0, 1]
    finish(redis_client, leases[16:])  # settled, the last 16 not reported yet: still short
    assert retrained_steps(client, tmp_path) == [0, 1]
    report(client, leases[16:], "step-2")
    assert retrained_steps(client, tmp_path) == [0, 1, 2]


def test_actuals_covering_every_trajectory_close_the_step_before_it_settles(
    client: TestClient, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """Workers report before their completions land: each of the 32 is reported, none is done."""
    leases = publish_step_2(client, redis_client, "step-2")
    report(client, leases, "step-2")
    assert retrained_steps(client, tmp_path) == [0, 1, 2]


def test_actuals_naming_no_schedule_leave_the_step_out(
    client: TestClient, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """The schedule settled, but its reports do not say they are its: a step run outside the
    delivery looks the same, and its end is not the service's to see."""
    leases = publish_step_2(client, redis_client, "step-2")
    finish(redis_client, leases)
    report(client, leases, None)
    assert retrained_steps(client, tmp_path) == [0, 1]


def test_one_actual_of_the_step_naming_no_schedule_keeps_it_open(
    client: TestClient, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """Every trajectory of the schedule reported, and one more of the step that names none: that
    part of the step ran outside the delivery, and may still be running."""
    ran_and_reported(client, redis_client, "step-2")
    assert client.post("/actuals", json={"actuals": [actual_report(2, 8, 0)]}).status_code == 200
    assert retrained_steps(client, tmp_path) == [0, 1]


def test_an_unsettled_schedule_that_reported_nothing_keeps_the_step_open(
    client: TestClient, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """The step was published in two parts: the first settled and reported, the second not begun."""
    ran_and_reported(client, redis_client, "step-2a")
    publish_second_part(client)
    assert retrained_steps(client, tmp_path) == [0, 1]


def test_the_automatic_retrain_still_fits_only_the_steps_before_its_own(
    client: TestClient, redis_client: redis.Redis, tmp_path: Path
) -> None:
    ran_and_reported(client, redis_client, "step-2")
    retrainer = client.app.state.context.retrainer  # type: ignore[attr-defined]
    assert fitted_steps(tmp_path, retrainer.retrain_now("step", 2).version) == [0, 1]


def _rows(*rows: tuple[int, str, int]) -> Trace:
    """Reports as the actuals stream's reader gives them: (step, prompt, sample) each."""
    return Trace.from_rows(
        TraceRow(step=step, prompt_id=prompt, sample_idx=sample, prompt_tokens=10, output_tokens=20)
        for step, prompt, sample in rows
    )


def test_the_reports_kept_are_the_newest_step_s_and_a_restart_starts_them_afresh() -> None:
    reports = StepReports()
    reports.fold(_rows((1, "p", 0), (2, "p", 0), (2, "p", 0)), ["a", "b", "b"], restarted=False)
    reports.fold(_rows((1, "p", 1), (2, "q", 0)), ["a", None], restarted=False)  # late: step 1
    last = reports.last()
    assert (last.step, last.unnamed, last.named) == (2, 1, frozenset({"a", "b"}))
    assert last.covered == {"b": frozenset({"p#0"})}
    reports.fold(_rows((0, "p", 0)), ["c"], restarted=True)
    last = reports.last()
    assert (last.step, last.unnamed, last.covered, last.named) == (
        0,
        0,
        {"c": frozenset({"p#0"})},
        frozenset({"c"}),
    )


def test_a_replica_that_planned_nothing_leaves_a_named_step_out_mid_step(
    make_client: AppFactory, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """Step 2 planned on one replica, half of it run and reported naming its schedule; a retrain
    asked of another replica that planned nothing here (restarted since, or behind the same
    balancer) reads the step's own schedules too, and leaves it out: it fitted every row, the
    first finishers of a step in flight among them. Once the step is over, both fit it."""
    planner, other = make_client(), make_client()
    leases = publish_step_2(planner, redis_client, "step-2")
    finish(redis_client, leases[:16])
    report(planner, leases[:16], "step-2")
    assert retrained_steps(other, tmp_path) == [0, 1]
    finish(redis_client, leases[16:])
    report(planner, leases[16:], "step-2")
    assert retrained_steps(other, tmp_path) == [0, 1, 2]

"""An asked-for retrain sees every part of the last step: the pipeline adds each schedule of a step
to the step's set before its publish, and the rule checks each part's trajectories, not its counts,
on the real embedded valkey (``service.learning.step_over``)."""

from __future__ import annotations

from pathlib import Path

import redis
from fastapi.testclient import TestClient

from service.api.progress_schemas import ResultsPage
from service.client.actuals import actual_from_result
from service.delivery import CompletionOutcome, Delivery, Lease, TrajectoryResult
from service.delivery import keys as keyspace
from service.settings import Settings
from tests.service.api_helpers import batch_body
from tests.service.learning.step_two import (
    finish,
    publish_second_part,
    publish_step_2,
    ran_and_reported,
    report,
    retrained_steps,
)

ABORTED = TrajectoryResult(output_tokens=0, finish_reason="abort", output="", wall_time_s=0.1)


def _second_part(client: TestClient, redis_client: redis.Redis) -> list[Lease]:
    """Step 2's second part, ``step-2b`` (4 prompts x 4), published and all 16 leased."""
    publish_second_part(client)
    delivery = Delivery(redis_client)
    leases = [*delivery.claim("step-2b", "w0", 64), *delivery.claim("step-2b", "w1", 64)]
    assert len(leases) == 16
    return leases


def test_a_settled_part_of_the_step_not_yet_reported_keeps_it_open(
    client: TestClient, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """``step-2b`` settled before any of its actuals arrived: it left the active index, and no
    actual names it, but the step's set does."""
    ran_and_reported(client, redis_client, "step-2a")
    leases = _second_part(client, redis_client)
    finish(redis_client, leases)
    assert retrained_steps(client, tmp_path) == [0, 1]
    report(client, leases, "step-2b")
    assert retrained_steps(client, tmp_path) == [0, 1, 2]


def test_each_publish_adds_its_schedule_to_the_step_s_set_for_the_retention(
    client: TestClient, redis_client: redis.Redis
) -> None:
    publish_step_2(client, redis_client, "step-2a")
    _second_part(client, redis_client)
    key = keyspace.step_schedules(2)
    assert redis_client.smembers(key) == {"step-2a", "step-2b"}
    retention_ms = Settings().retention_s * 1000
    assert retention_ms - 60_000 < redis_client.pttl(key) <= retention_ms


def test_a_dry_run_adds_nothing_to_the_step_s_set(client: TestClient, redis_client: redis.Redis) -> None:
    body = batch_body(step=2, schedule_id="step-2") | {"publish": False}
    assert client.post("/schedule", json=body).status_code == 200
    assert redis_client.exists(keyspace.step_schedules(2)) == 0


def test_a_part_withdrawn_before_its_publish_is_no_part_of_the_step(
    client: TestClient, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """The pipeline added ``step-2w`` to the set, then a DELETE withdrew it while it planned: its
    publish was refused, it published nothing, and the step is over once ``step-2a`` is."""
    ran_and_reported(client, redis_client, "step-2a")
    delivery = Delivery(redis_client)
    delivery.mark_planning("step-2w", "request-1", 60_000)
    delivery.enter_step(2, "step-2w", 3600)
    assert delivery.cancel("step-2w", withdraw_s=3600).withdrawn
    assert retrained_steps(client, tmp_path) == [0, 1, 2]


def test_a_part_whose_keys_are_gone_keeps_the_step_open(
    client: TestClient, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """In the set, but no keys and not withdrawn: its retention passed, or its publish failed after it
    joined the set; whether it ran is not known."""
    ran_and_reported(client, redis_client, "step-2a")
    Delivery(redis_client).enter_step(2, "step-2x", 3600)
    assert retrained_steps(client, tmp_path) == [0, 1]


def test_a_part_cancelled_before_anything_ran_is_over(
    client: TestClient, redis_client: redis.Redis, tmp_path: Path
) -> None:
    ran_and_reported(client, redis_client, "step-2a")
    publish_second_part(client)
    assert client.delete("/schedule/step-2b").status_code == 200
    assert retrained_steps(client, tmp_path) == [0, 1, 2]


def test_a_reported_cancelled_trajectory_does_not_stand_in_for_a_done_one(
    client: TestClient, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """16 done, 16 cancelled while running; 15 of the done and one cancelled reported (``partial``):
    as many reports as done, but a done trajectory is still unreported."""
    leases = publish_step_2(client, redis_client, "step-2")
    finish(redis_client, leases[:16])
    assert client.delete("/schedule/step-2").status_code == 200
    reported = [*leases[:15], leases[16]]
    report(client, reported, "step-2", partial=True)
    assert retrained_steps(client, tmp_path) == [0, 1]
    report(client, [leases[15]], "step-2", partial=True)
    assert retrained_steps(client, tmp_path) == [0, 1, 2]


def test_a_done_trajectory_whose_result_says_nothing_of_length_needs_no_actual(
    client: TestClient, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """The engine aborted the first to finish: its result says nothing of length, so no client
    reports it (``actual_from_result``); the step is over once the other 31 are reported. Its result
    is the oldest of 32, past the first page the rule reads (newest first)."""
    leases = publish_step_2(client, redis_client, "step-2")
    assert Delivery(redis_client).complete(leases[0], ABORTED) is CompletionOutcome.ACCEPTED
    finish(redis_client, leases[1:])
    report(client, leases[1:31], "step-2")
    assert retrained_steps(client, tmp_path) == [0, 1]  # the newest, which says a length, unreported
    report(client, leases[31:], "step-2")
    assert retrained_steps(client, tmp_path) == [0, 1, 2]


def test_a_step_reported_as_the_client_reports_it_is_over_with_an_aborted_result(
    client: TestClient, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """The trainer turns each served result into an actual as the client does (``actual_from_result``,
    what ``report_results`` sends): the aborted one makes none, and the step is fitted all the same."""
    leases = publish_step_2(client, redis_client, "step-2")
    finish(redis_client, leases[:31])
    assert Delivery(redis_client).complete(leases[31], ABORTED) is CompletionOutcome.ACCEPTED
    page = ResultsPage.model_validate(client.get("/schedule/step-2/results").json())
    prompt_tokens = {f"p{prompt}": 100 for prompt in range(8)}
    made = [actual_from_result(2, entry, prompt_tokens, {}, "step-2") for entry in page.results]
    reports = [report.model_dump(mode="json") for report in made if report is not None]
    assert (len(page.results), len(reports)) == (32, 31)
    assert client.post("/actuals", json={"actuals": reports}).status_code == 200
    assert retrained_steps(client, tmp_path) == [0, 1, 2]

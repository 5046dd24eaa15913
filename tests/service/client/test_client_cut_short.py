"""The trainer's client does not report a step cut short as the predictor's history, unless asked:
its results are the trajectories that finished first, the short ones."""

from __future__ import annotations

import dataclasses
import json
from typing import cast

import pytest
import redis

from service.client import (
    PartialStepError,
    SchedulerAPIError,
    SchedulerClient,
    StepResults,
    actual_from_result,
)
from service.delivery import CompletionOutcome, Delivery
from service.settings import Settings
from tests.service.api_helpers import LiveServer, batch_body
from tests.service.finished import RESULT, finished_with

LENGTHS = {"p0": 100, "p1": 110}  # the prompts' lengths in batch_body(prompts=2)


def _cancelled_midway(client: SchedulerClient, redis_client: redis.Redis) -> StepResults:
    """A 4-trajectory step of which two short ones finished before the trainer cancelled it."""
    plan = client.schedule(batch_body(prompts=2, n=2, workers=1, schedule_id="step-3"))
    delivery = Delivery(redis_client)
    for lease in delivery.claim(plan.schedule_id, "w0", 4)[:2]:
        assert delivery.complete(lease, RESULT) is CompletionOutcome.ACCEPTED
    client.cancel(plan.schedule_id)
    return client.wait(plan.schedule_id, timeout_s=10)


def test_reporting_a_cancelled_step_raises_and_sends_nothing(
    live_settings: Settings, redis_client: redis.Redis
) -> None:
    with LiveServer(live_settings) as server, SchedulerClient(server.url) as client:
        finished = _cancelled_midway(client, redis_client)
        with pytest.raises(PartialStepError, match="cancelled with 2 of its 4") as refused:
            client.report_results(3, finished, prompt_tokens=LENGTHS)
    assert refused.value.schedule_id == "step-3"
    assert redis_client.exists("rs:actuals") == 0


def test_a_cancelled_step_is_reported_when_the_trainer_says_partial(
    live_settings: Settings, redis_client: redis.Redis
) -> None:
    with LiveServer(live_settings) as server, SchedulerClient(server.url) as client:
        finished = _cancelled_midway(client, redis_client)
        accepted = client.report_results(3, finished, prompt_tokens=LENGTHS, partial=True)
    assert accepted is not None
    assert (accepted.accepted, redis_client.xlen("rs:actuals")) == (2, 2)


def test_a_step_not_finished_yet_is_not_reported(live_settings: Settings, redis_client: redis.Redis) -> None:
    with LiveServer(live_settings) as server, SchedulerClient(server.url) as client:
        finished = _cancelled_midway(client, redis_client)
        running = finished.progress.model_copy(update={"cancelled": 0, "running": 2})  # read mid-step
        with pytest.raises(PartialStepError, match="has not finished"):
            client.report_results(3, dataclasses.replace(finished, progress=running), prompt_tokens=LENGTHS)
    assert redis_client.exists("rs:actuals") == 0


def test_the_service_refuses_a_cancelled_step_s_actuals_reported_one_by_one(
    live_settings: Settings, redis_client: redis.Redis
) -> None:
    """``report_actuals`` takes reports built by hand, from any step: the service itself tells."""
    with LiveServer(live_settings) as server, SchedulerClient(server.url) as client:
        finished = _cancelled_midway(client, redis_client)
        reports = [actual_from_result(3, r, LENGTHS, {}, "step-3") for r in finished.results]
        with pytest.raises(SchedulerAPIError) as refused:
            client.report_actuals([r for r in reports if r is not None])
    assert (refused.value.status, refused.value.field) == (409, "actuals[0].schedule_id")
    assert not refused.value.retryable
    assert redis_client.exists("rs:actuals") == 0


def _group_cut(client: SchedulerClient, redis_client: redis.Redis) -> StepResults:
    """DAPO's cut: p0's group of 2 finished, p1's long second sample was still decoding at the cancel."""
    plan = client.schedule(batch_body(prompts=2, n=2, workers=1, schedule_id="step-4"))
    delivery = Delivery(redis_client)
    lengths = {"p0#0": 40, "p0#1": 60, "p1#0": 30}
    for lease in delivery.claim(plan.schedule_id, "w0", 4):
        if lease.key in lengths:
            result = finished_with(output_tokens=lengths[lease.key])
            assert delivery.complete(lease, result) is CompletionOutcome.ACCEPTED
    client.cancel(plan.schedule_id)
    return client.wait(plan.schedule_id, timeout_s=10)


@pytest.mark.parametrize("sizes", [2, {"p0": 2, "p1": 2}], ids=["one size", "per prompt"])
def test_a_partial_report_given_group_sizes_leaves_out_the_groups_the_cancel_cut(
    sizes: int | dict[str, int], live_settings: Settings, redis_client: redis.Redis
) -> None:
    """p1's finished sample is its short one: reported, it teaches that p1 is short."""
    with LiveServer(live_settings) as server, SchedulerClient(server.url) as client:
        finished = _group_cut(client, redis_client)
        accepted = client.report_results(4, finished, prompt_tokens=LENGTHS, partial=True, group_sizes=sizes)
    assert accepted is not None
    assert accepted.accepted == 2
    entries = cast(list[tuple[str, dict[str, str]]], redis_client.xrange("rs:actuals"))
    stored = [json.loads(fields["a"]) for _, fields in entries]
    assert sorted((a["prompt_id"], a["sample_idx"]) for a in stored) == [("p0", 0), ("p0", 1)]


def test_a_group_size_below_one_is_refused_naming_it(
    live_settings: Settings, redis_client: redis.Redis
) -> None:
    with LiveServer(live_settings) as server, SchedulerClient(server.url) as client:
        finished = _group_cut(client, redis_client)
        with pytest.raises(ValueError, match=r"group_sizes\['p1'\]=0"):
            client.report_results(4, finished, prompt_tokens=LENGTHS, partial=True, group_sizes={"p1": 0})
    assert redis_client.exists("rs:actuals") == 0


def test_a_partial_report_that_leaves_no_group_whole_sends_nothing_and_returns_none(
    live_settings: Settings, redis_client: redis.Redis
) -> None:
    """A cancel that cut every group: nothing to report, said by ``None`` (docs/client.md), not a
    request of no reports."""
    with LiveServer(live_settings) as server, SchedulerClient(server.url) as client:
        finished = _group_cut(client, redis_client)
        assert client.report_results(4, finished, prompt_tokens=LENGTHS, partial=True, group_sizes=3) is None
    assert redis_client.exists("rs:actuals") == 0

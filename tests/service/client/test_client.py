"""The trainer's Python client against a real uvicorn server and Redis, workers played by the protocol."""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any

import httpx
import pytest
import redis

from service.api.progress_schemas import ResultEntry
from service.client import SchedulerAPIError, SchedulerClient, ServiceUnreachableError, actual_from_result
from service.client.wire import DEADLINE_HEADER
from service.delivery import Delivery
from service.pipeline import deadline
from service.ports import free_port
from service.problems.details import MAX_ECHO
from service.settings import Settings
from tests.service.api_helpers import TRAINER, WORKER, LiveServer, actual_report, batch_body, with_settings
from tests.service.step_workers import waited_while_worked, work_queue


def test_a_trainer_submits_waits_for_results_and_reports_actuals(
    live_settings: Settings, redis_client: redis.Redis
) -> None:
    settings = with_settings(live_settings, trainer_tokens=TRAINER, worker_tokens=WORKER)
    with LiveServer(settings) as server, SchedulerClient(server.url, token=TRAINER) as client:
        plan = client.schedule(batch_body(prompts=4, n=4, workers=2))
        finished = waited_while_worked(client, Delivery(redis_client), plan)
        assert finished.progress.done == 16
        assert sorted(r.key for r in finished.results) == sorted(
            f"p{p}#{s}" for p in range(4) for s in range(4)
        )
        lengths = {f"p{p}": 100 + 10 * p for p in range(4)}
        rewards = {r.key: 1.0 for r in finished.results}
        accepted = client.report_results(0, finished, prompt_tokens=lengths, rewards=rewards)
        assert accepted is not None
        assert accepted.accepted == 16
        assert redis_client.xlen("rs:actuals") == 16
        entries: Any = redis_client.xrange("rs:actuals")
        stored = [json.loads(fields["a"]) for _, fields in entries]
        assert {a["schedule_id"] for a in stored} == {plan.schedule_id}  # read against its step's profiles
        assert (client.models().version, client.models().history_rows) == ("fallback", 16)


def test_waiting_outlasts_a_service_restart_in_the_middle_of_the_step(
    live_settings: Settings, redis_client: redis.Redis
) -> None:
    first = LiveServer(live_settings).__enter__()
    client = SchedulerClient(first.url, timeout_s=2.0)
    plan = client.schedule(batch_body(prompts=2, n=2, workers=2))
    first.__exit__()  # the service goes away while the trainer waits

    def restart_then_work() -> None:
        time.sleep(1.0)
        restarted.append(LiveServer(live_settings, port=first.port).__enter__())
        for worker in plan.assignments:
            work_queue(Delivery(redis_client), plan.schedule_id, worker)

    restarted: list[LiveServer] = []
    helper = threading.Thread(target=restart_then_work)
    helper.start()
    try:
        finished = client.wait(plan.schedule_id, timeout_s=30, poll_ms=200)
    finally:
        helper.join()
        client.close()
        for server in restarted:
            server.__exit__()
    assert (finished.progress.done, len(finished.results)) == (4, 4)


def test_waiting_on_a_service_that_stays_away_past_the_timeout_is_a_timeout() -> None:
    client = SchedulerClient(f"http://127.0.0.1:{free_port()}", timeout_s=0.5)
    with client, pytest.raises(TimeoutError):
        client.wait("any", timeout_s=1.0, outage_s=60.0)


def test_a_refusal_raises_with_the_problem_document(live_settings: Settings) -> None:
    settings = with_settings(live_settings, trainer_tokens=TRAINER, worker_tokens=WORKER)
    with LiveServer(settings) as server:
        with SchedulerClient(server.url, token=WORKER) as worker, pytest.raises(SchedulerAPIError) as denied:
            worker.schedule(batch_body())
        assert denied.value.status == 403
        assert not denied.value.retryable
        body = batch_body()
        body["batch"]["items"][0]["n"] = 0
        with SchedulerClient(server.url, token=TRAINER) as trainer, pytest.raises(SchedulerAPIError) as bad:
            trainer.schedule(body)
        assert bad.value.status == 422
        assert bad.value.field == "batch.items[0].n"


def test_waiting_past_the_timeout_raises(live_settings: Settings) -> None:
    with LiveServer(live_settings) as server, SchedulerClient(server.url) as client:
        plan = client.schedule(batch_body(prompts=1, n=1, workers=1))
        with pytest.raises(TimeoutError):
            client.wait(plan.schedule_id, timeout_s=0.3, poll_ms=100)


def test_a_long_poll_longer_than_the_client_timeout_is_not_cut_short_as_one(live_settings: Settings) -> None:
    with LiveServer(live_settings) as server:
        with SchedulerClient(server.url) as planner:  # planning may take over 0.3 s on a loaded host
            plan = planner.schedule(batch_body(prompts=1, n=1, workers=1))
        with SchedulerClient(server.url, timeout_s=0.3) as client:
            assert client.results(plan.schedule_id, wait_ms=800).results == []  # no ReadTimeout
            with pytest.raises(TimeoutError):  # the schedule's own timeout
                client.wait(plan.schedule_id, timeout_s=1.0, poll_ms=800)


def test_a_poll_longer_than_the_service_s_longest_long_poll_still_waits(
    live_settings: Settings, redis_client: redis.Redis
) -> None:
    """The results route long-polls 30 s at most (``wait_ms`` past it is a 422): a ``poll_ms`` above
    that made ``wait`` raise the 422 on its first poll of a step still running."""
    with LiveServer(live_settings) as server, SchedulerClient(server.url) as client:
        plan = client.schedule(batch_body(prompts=1, n=1, workers=1))
        (worker,) = plan.assignments
        later = threading.Timer(0.5, work_queue, args=(Delivery(redis_client), plan.schedule_id, worker))
        later.start()
        try:
            finished = client.wait(plan.schedule_id, timeout_s=60, poll_ms=60_000)
        finally:
            later.join()
        assert (finished.progress.done, len(finished.results)) == (1, 1)


def test_an_unreachable_service_is_a_retryable_scheduler_error() -> None:
    """Retried through its outage allowance (a second here: the default minute proves no more), then
    raised as the client's retryable error."""
    client = SchedulerClient(f"http://127.0.0.1:{free_port()}", timeout_s=2.0)
    with client, pytest.raises(ServiceUnreachableError) as unreachable:
        client.progress("anything", outage_s=1.0)
    assert unreachable.value.retryable
    assert isinstance(unreachable.value, SchedulerAPIError)


@pytest.mark.parametrize("url", ["scheduler:8000", "127.0.0.1:8000", "ftp://scheduler", "http://[::1"])
def test_a_url_that_names_no_http_service_is_refused_when_the_client_is_built(url: str) -> None:
    # Sent, it would fail as a retryable ServiceUnreachableError: a typo retried as an outage.
    with pytest.raises(ValueError, match="url="):
        SchedulerClient(url)


def test_a_token_read_with_its_newline_still_authenticates(live_settings: Settings) -> None:
    settings = with_settings(live_settings, trainer_tokens=TRAINER, worker_tokens=WORKER)
    with LiveServer(settings) as server, SchedulerClient(server.url, token=f" {TRAINER}\n") as client:
        assert client.schedule(batch_body(publish=False)).published is False


def test_an_actual_carries_the_cap_its_sidecar_recorded() -> None:
    """A cut output is a lower bound only below a known cap: without it a raised cap was predicted at
    the old one (docs/predictors.md, truncated lengths)."""
    entry = ResultEntry(
        stream_id="1-0",
        key="p0#3",
        worker_id="w0",
        attempt=1,
        output_tokens=1024,
        finish_reason="length",
        wall_time_s=9.0,
        output="",
        reward=None,
        extra={"prompt_tokens": 80, "max_new_tokens": 1024, "concurrency": 12.5},
    )
    report = actual_from_result(4, entry, {}, {})
    assert report is not None
    assert (report.prompt_id, report.sample_idx, report.max_new_tokens) == ("p0", 3, 1024)
    uncapped = actual_from_result(4, entry.model_copy(update={"extra": {"prompt_tokens": 80}}), {}, {})
    assert uncapped is not None
    assert uncapped.max_new_tokens is None


def test_waiting_on_a_service_that_hangs_ends_at_the_wait_s_timeout_not_the_request_s() -> None:
    """A service that takes the connection and never answers (a hung process; a host gone, its
    packets dropped): each request hung for the client's ``timeout_s`` (60 s by default) before
    ``wait`` looked at its own ``timeout_s``, so ``wait(timeout_s=1)`` raised after a minute."""
    hung = socket.create_server(("127.0.0.1", 0))  # listens, never accepts: requests hang unread
    with hung, SchedulerClient(f"http://127.0.0.1:{hung.getsockname()[1]}", timeout_s=10.0) as client:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            client.wait("step-0", timeout_s=1.0)
        # its 1 s and one request's 1 s of grace; it was the request's 10 s: any bound below those
        # tells them apart, and a loaded host must not fail it
        assert time.monotonic() - started < 10.0 * 0.8


def test_a_lone_surrogate_in_a_prompt_is_the_service_s_422_naming_the_item(live_settings: Settings) -> None:
    """A dataset string cut inside a UTF-16 pair (``"\\ud83d"``) failed in httpx's UTF-8 encoding of
    the body, a bare ``UnicodeEncodeError`` naming no item; sent escaped, the service names it."""
    body = batch_body(prompts=4)
    body["batch"]["items"][3]["prompt"] = "a broken emoji: \ud83d"
    with (
        LiveServer(live_settings) as server,
        SchedulerClient(server.url) as client,
        pytest.raises(SchedulerAPIError) as refused,
    ):
        client.schedule(body)
    assert (refused.value.status, refused.value.field) == (422, "batch.items[3].prompt")


def test_a_nan_reward_is_the_service_s_422_naming_the_report(live_settings: Settings) -> None:
    """A reward function that returned NaN failed in httpx's encoding of the body, a bare
    ``ValueError`` ("Out of range float values are not JSON compliant") naming no report."""
    reports = [actual_report(0, 0, 0), {**actual_report(0, 0, 1), "reward": float("nan")}]
    with (
        LiveServer(live_settings) as server,
        SchedulerClient(server.url) as client,
        pytest.raises(SchedulerAPIError) as refused,
    ):
        client.report_actuals(reports)
    assert (refused.value.status, refused.value.field) == (422, "actuals[1].reward")


def test_a_refused_extra_nested_past_the_validation_depth_is_named_in_a_short_field(
    live_settings: Settings,
) -> None:
    """The service's 422 for a ``sampling.extra`` nested past pydantic's validation depth named the
    whole location, hundreds of parts: the error's ``field`` was 1.8 KB, and its message as long. Now
    the start names the field, an ellipsis stands for the middle (service/problems/details.py)."""
    extra: Any = 1
    for _ in range(300):
        extra = {"a": extra}
    with (
        LiveServer(live_settings) as server,
        SchedulerClient(server.url) as client,
        pytest.raises(SchedulerAPIError) as refused,
    ):
        client.schedule(batch_body(sampling={"extra": extra}))
    field = refused.value.field
    assert refused.value.status == 422
    assert field is not None
    assert field.startswith("sampling.extra.a.")
    assert len(field) <= MAX_ECHO
    assert len(str(refused.value)) < 2 * MAX_ECHO


class _Recording(httpx.HTTPTransport):
    """Sends every request on, keeping the bodies sent."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[bytes] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(request.read())
        return super().handle_request(request)


def test_non_ascii_prompts_are_sent_as_utf_8_not_escaped(live_settings: Settings) -> None:
    """Escaping every non-ASCII character (``\\u4e2d``) would double a Chinese prompt's bytes
    against ``ROLLOUT_MAX_BODY_BYTES``: only a body UTF-8 cannot carry is sent escaped."""
    body = batch_body(prompts=1, publish=False)
    body["batch"]["items"][0]["prompt"] = "中文提示" * 100
    transport = _Recording()
    with LiveServer(live_settings) as server, SchedulerClient(server.url, transport=transport) as client:
        assert client.schedule(body).published is False
    assert ("中文提示" * 100).encode() in transport.bodies[0]


def test_the_client_tells_the_service_how_long_it_waits(live_settings: Settings) -> None:
    """``SchedulerClient`` sends its ``timeout_s``: the plan's budget comes back capped by it."""
    assert DEADLINE_HEADER == deadline.HEADER  # the client names it again: no server import
    body = batch_body(schedule_id="told", time_budget_ms=60_000, policy="round_robin")
    with LiveServer(live_settings) as server, SchedulerClient(server.url, timeout_s=30.0) as client:
        answer = client.schedule(body)
    assert answer.time_budget_ms is not None
    assert 0 < answer.time_budget_ms <= 30_000 - deadline.MIN_RESERVE_S * 1000


def test_a_client_that_waits_practically_for_ever_is_planned_as_one_without_a_timeout(
    live_settings: Settings,
) -> None:
    """A ``timeout_s`` past the header's 10 digits (1e9 s) is no deadline: it was a 422 on every step."""
    body = batch_body(schedule_id="patient", time_budget_ms=60_000, policy="round_robin")
    with LiveServer(live_settings) as server, SchedulerClient(server.url, timeout_s=1e9) as client:
        assert client.schedule(body).time_budget_ms == 60_000

"""The trainer's client when replies are lost or refused: a real server and Redis; the only thing
played is the network, by a transport that forwards a request and then loses its reply."""

from __future__ import annotations

import json
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import redis

from service.api.progress_schemas import CancelResponse, ProgressResponse, ResultEntry
from service.api.schemas import ScheduleResponse
from service.client import (
    AlreadyPublishedError,
    SchedulerAPIError,
    SchedulerClient,
    ServiceUnreachableError,
    StepResults,
)
from service.client import scheduler_client as client_module
from service.delivery import Delivery
from service.ports import free_port
from service.settings import Settings
from tests.service.api_helpers import LiveServer, actual_history, batch_body, with_settings
from tests.service.finished import RESULT


class LosesReplies(httpx.HTTPTransport):
    """Sends every request to the server, but loses the replies of the ``lose`` numbered requests
    (1 = the first) to ``path``: the server did the work, the client saw a timeout."""

    def __init__(self, path: str, lose: set[int]) -> None:
        super().__init__()
        self.path, self.lose, self.seen = path, lose, 0
        self.bodies: list[bytes] = []
        self.lost: list[bytes] = []  # the replies the client never saw

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if request.url.path != self.path:
            return response
        self.seen += 1
        self.bodies.append(request.content)
        if self.seen in self.lose:
            self.lost.append(response.read())
            response.close()
            raise httpx.ReadTimeout("reply lost", request=request)
        return response


def _finished(steps: int, schedule_id: str = "s-1") -> StepResults:
    """A finished step of ``steps`` results, each with its prompt length recorded by the sidecar."""
    results = [
        ResultEntry(
            stream_id=f"{i + 1}-0",
            key=f"p{i}#0",
            worker_id="w0",
            attempt=1,
            output_tokens=100 + i,
            finish_reason="stop",
            wall_time_s=1.0,
            output="",
            reward=None,
            extra={"prompt_tokens": 50},
        )
        for i in range(steps)
    ]
    progress = ProgressResponse(
        schedule_id=schedule_id,
        total=steps,
        queued=0,
        running=0,
        done=steps,
        failed=0,
        workers={},
        dead_letter=[],
        dead_letters=[],
    )
    return StepResults(results=results, progress=progress)


def test_a_step_whose_actuals_exceed_one_body_is_reported_in_chunks(
    live_settings: Settings, redis_client: redis.Redis
) -> None:
    # 300 reports are ~50 KB: over this service's body limit in one request, not in chunks of 100.
    settings = with_settings(live_settings, max_body_bytes=40_000)
    with LiveServer(settings) as server, SchedulerClient(server.url) as client:
        accepted = client.report_results(0, _finished(300), chunk=100)
    assert accepted is not None
    assert (accepted.accepted, accepted.repeated) == (300, 0)
    assert redis_client.xlen("rs:actuals") == 300


def test_a_chunk_whose_reply_was_lost_is_sent_again_and_stored_once(
    live_settings: Settings, redis_client: redis.Redis
) -> None:
    transport = LosesReplies("/actuals", lose={2})
    with LiveServer(live_settings) as server, SchedulerClient(server.url, transport=transport) as client:
        accepted = client.report_actuals(
            [_report(i) for i in range(25)], chunk=10
        )  # chunks 10, 10, 5; the second's reply is lost after the server stored it
    assert transport.seen == 4
    assert transport.bodies[1] == transport.bodies[2]  # the same chunk, sent again
    assert (accepted.accepted, accepted.repeated) == (15, 10)
    entries: Any = redis_client.xrange("rs:actuals")
    stored = [json.loads(fields["a"])["prompt_id"] for _, fields in entries]
    assert sorted(stored) == sorted(f"p{i}" for i in range(25))  # each once


def test_a_refused_chunk_is_not_retried_and_names_its_field(live_settings: Settings) -> None:
    transport = LosesReplies("/actuals", lose=set())
    reports = [_report(i) for i in range(3)]
    reports[1]["output_tokens"] = 0
    with (
        LiveServer(live_settings) as server,
        SchedulerClient(server.url, transport=transport) as client,
        pytest.raises(SchedulerAPIError) as refused,
    ):
        client.report_actuals(reports)
    assert (refused.value.status, transport.seen) == (422, 1)
    assert refused.value.field == "actuals[1].output_tokens"


def test_a_retry_after_is_waited_out_within_the_outage_allowance(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = iter([503, 503, 200])
    waits: list[float] = []

    def answer(request: httpx.Request) -> httpx.Response:
        status = next(answers)
        if status == 503:
            return httpx.Response(503, headers={"Retry-After": "7"}, json={"title": "Redis unavailable"})
        return httpx.Response(200, json={"accepted": 1, "stream_length": 1, "time_scales": {}})

    clock = iter(float(t) for t in range(0, 100, 10))  # each failure is 10 s after the one before
    monkeypatch.setattr(
        client_module, "time", SimpleNamespace(monotonic=lambda: next(clock), sleep=waits.append)
    )
    client = SchedulerClient("http://scheduler:8000", transport=httpx.MockTransport(answer))
    with client:
        assert client.report_actuals([_report(0)], outage_s=12.0).accepted == 1
    assert waits == [7.0, 2.0]  # the second wait ends where the 12 s allowance does (failing since 0)


def _report(i: int) -> dict[str, Any]:
    return {
        "step": 0,
        "prompt_id": f"p{i}",
        "sample_idx": 0,
        "worker_id": "w0",
        "prompt_tokens": 50,
        "output_tokens": 100 + i,
        "finish_reason": "stop",
    }


def test_a_step_whose_reply_was_lost_is_sent_again_published_once_and_its_plan_returned(
    live_settings: Settings, redis_client: redis.Redis
) -> None:
    transport = LosesReplies("/schedule", lose={1})
    body = batch_body(prompts=2, n=2, workers=2, schedule_id="run-1-step-0")
    with LiveServer(live_settings) as server, SchedulerClient(server.url, transport=transport) as client:
        plan = client.schedule(body)  # neither a ServiceUnreachableError nor an AlreadyPublishedError
        assert (plan.schedule_id, plan.replayed, transport.seen) == ("run-1-step-0", True, 2)
        lost = ScheduleResponse.model_validate_json(transport.lost[0])  # the answer the timeout ate
        mine = {"timings", "replayed"}  # the request's own
        assert plan.model_dump(exclude=mine) == lost.model_dump(exclude=mine)
        assert client.progress("run-1-step-0").total == 4  # one copy of the work


def test_a_lost_reply_retried_on_an_older_server_that_answers_409_raises_already_published() -> None:
    """A mixed-version roll: the retry reaches a replica from before answers were stored."""
    answers = iter([httpx.ReadTimeout("reply lost"), None])
    conflict = {"title": "Conflict", "status": 409, "field": "schedule_id", "value": "run-1-step-0"}

    def answer(request: httpx.Request) -> httpx.Response:
        lost = next(answers)
        if lost is not None:
            raise lost
        return httpx.Response(409, json=conflict, headers={"content-type": "application/problem+json"})

    body = batch_body(prompts=1, n=1, workers=1, schedule_id="run-1-step-0")
    with (
        SchedulerClient("http://scheduler:8000", transport=httpx.MockTransport(answer)) as client,
        pytest.raises(AlreadyPublishedError) as published,
    ):
        client.schedule(body)
    assert published.value.schedule_id == "run-1-step-0"  # follow it: ``wait`` on that id


def test_a_step_without_its_own_id_is_sent_once(live_settings: Settings) -> None:
    transport = LosesReplies("/schedule", lose={1})
    with (
        LiveServer(live_settings) as server,
        SchedulerClient(server.url, transport=transport) as client,
        pytest.raises(ServiceUnreachableError),
    ):
        client.schedule(batch_body(prompts=1, n=1, workers=1))  # a retry would publish a second step
    assert transport.seen == 1


@pytest.mark.parametrize("body", [b'["bad gateway"]', b'"bad gateway"', b"<html>bad gateway</html>"])
def test_a_proxy_error_that_is_no_problem_document_is_still_a_retryable_scheduler_error(body: bytes) -> None:
    """A gateway in front of the service answers its own bodies: ``wait`` rides out a retryable
    ``SchedulerAPIError``, and anything else raised here would end the trainer's wait at once."""
    proxy = httpx.MockTransport(lambda request: httpx.Response(502, content=body))
    with (
        SchedulerClient("http://scheduler:8000", transport=proxy) as client,
        pytest.raises(SchedulerAPIError) as bad,
    ):
        client.progress("run-1-step-0", outage_s=0.0)
    assert (bad.value.status, bad.value.retryable) == (502, True)
    assert "bad gateway" in str(bad.value)


def test_progress_whose_reply_was_lost_is_read_again_as_wait_reads_it(
    live_settings: Settings,
) -> None:
    """It was sent once: a trainer polling ``progress`` itself met a restart or a Redis outage as an
    error, where ``wait`` and ``report_actuals`` ride it out for ``outage_s``."""
    transport = LosesReplies("/schedule/run-1-step-0", lose={1})
    with LiveServer(live_settings) as server, SchedulerClient(server.url, transport=transport) as client:
        client.schedule(batch_body(prompts=2, n=2, workers=2, schedule_id="run-1-step-0"))
        progress = client.progress("run-1-step-0")
    assert (progress.total, transport.seen) == (4, 2)


def test_progress_of_a_step_gone_from_redis_is_its_404_at_once(live_settings: Settings) -> None:
    transport = LosesReplies("/schedule/run-1-step-9", lose=set())
    with (
        LiveServer(live_settings) as server,
        SchedulerClient(server.url, transport=transport) as client,
        pytest.raises(SchedulerAPIError) as gone,
    ):
        client.progress("run-1-step-9")
    assert (gone.value.status, transport.seen) == (404, 1)


def test_waiting_on_a_step_gone_from_redis_ends_with_its_404(live_settings: Settings) -> None:
    """Expired (retention) or never published, the step cannot finish: ``wait`` says so at once
    rather than retrying a refusal as an outage until ``outage_s``."""
    transport = LosesReplies("/schedule/run-1-step-9", lose=set())
    with (
        LiveServer(live_settings) as server,
        SchedulerClient(server.url, transport=transport) as client,
        pytest.raises(SchedulerAPIError) as gone,
    ):
        client.wait("run-1-step-9", timeout_s=None)
    assert (gone.value.status, transport.seen) == (404, 1)


def test_a_results_page_whose_reply_was_lost_is_read_again(
    live_settings: Settings, redis_client: redis.Redis
) -> None:
    """It was sent once: a trainer paging results itself met a restart or a lost reply as an error."""
    transport = LosesReplies("/schedule/run-1-step-0/results", lose={1})
    with LiveServer(live_settings) as server, SchedulerClient(server.url, transport=transport) as client:
        client.schedule(batch_body(prompts=2, n=2, workers=2, schedule_id="run-1-step-0"))
        delivery = Delivery(redis_client)
        [done] = delivery.claim("run-1-step-0", "w0", 1)
        delivery.complete(done, RESULT)
        page = client.results("run-1-step-0")
    assert ([r.key for r in page.results], transport.seen) == ([done.key], 2)


def test_a_cancel_whose_reply_was_lost_is_sent_again_and_returns_what_the_first_answered(
    live_settings: Settings,
) -> None:
    """The service answers a repeated DELETE with the first cancel's counts, changing nothing, so the
    retry is safe and its answer is the one the timeout ate."""
    transport = LosesReplies("/schedule/run-1-step-0", lose={1})
    with LiveServer(live_settings) as server, SchedulerClient(server.url, transport=transport) as client:
        client.schedule(batch_body(prompts=2, n=2, workers=2, schedule_id="run-1-step-0"))
        answer = client.cancel("run-1-step-0")
        assert transport.seen == 2
        assert answer == CancelResponse.model_validate_json(transport.lost[0])
        assert (answer.cancelled, client.progress("run-1-step-0").cancelled) == (4, 4)


def test_the_models_whose_reply_was_lost_are_read_again(live_settings: Settings) -> None:
    transport = LosesReplies("/models", lose={1})
    with LiveServer(live_settings) as server, SchedulerClient(server.url, transport=transport) as client:
        status = client.models()
    assert (status.version, transport.seen) == ("fallback", 2)


@pytest.mark.parametrize("read", ["results", "cancel"])
def test_a_read_or_cancel_of_a_step_gone_from_redis_is_its_404_at_once(
    live_settings: Settings, read: str
) -> None:
    path = "/schedule/run-1-step-9" + ("/results" if read == "results" else "")
    transport = LosesReplies(path, lose=set())
    with (
        LiveServer(live_settings) as server,
        SchedulerClient(server.url, transport=transport) as client,
        pytest.raises(SchedulerAPIError) as gone,
    ):
        getattr(client, read)("run-1-step-9")
    assert (gone.value.status, transport.seen) == (404, 1)


def test_a_retrain_whose_reply_was_lost_is_not_sent_again(
    live_settings: Settings, redis_client: redis.Redis
) -> None:
    """Each retrain that gets through stores a new version: a retry would store a second."""
    transport = LosesReplies("/models/retrain", lose={1})
    with LiveServer(live_settings) as server, SchedulerClient(server.url, transport=transport) as client:
        client.report_actuals(actual_history(steps=2))
        with pytest.raises(ServiceUnreachableError):
            client.retrain()
        assert (client.models().stored_versions, transport.seen) == (["v1"], 1)


def _pauses_against_a_closed_port(monkeypatch: pytest.MonkeyPatch, outage_s: float) -> list[float]:
    """The pauses of ``progress`` retried against a port nothing listens on (a real refused
    connection), on a clock that advances by each pause, until the outage allowance runs out."""
    now = [0.0]
    pauses: list[float] = []

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        now[0] += seconds

    monkeypatch.setattr(client_module, "time", SimpleNamespace(monotonic=lambda: now[0], sleep=sleep))
    client = SchedulerClient(f"http://127.0.0.1:{free_port()}", timeout_s=1.0)
    with client, pytest.raises(ServiceUnreachableError):
        client.progress("step-0", outage_s=outage_s)
    return pauses


def test_retries_through_an_outage_back_off_with_jitter(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fixed 0.5 s pause sent 120 requests a minute per trainer at a service coming back from a
    restart, every trainer on the same beat: the pauses grow, to a cap, each drawn at random."""
    first = _pauses_against_a_closed_port(monkeypatch, outage_s=60.0)
    second = _pauses_against_a_closed_port(monkeypatch, outage_s=60.0)
    assert len(first) < 30  # a fixed 0.5 s: 120
    assert max(first) <= client_module.MAX_BACKOFF_S
    assert sum(first[:3]) < 4.0  # a short blip is still ridden out at once
    assert first[-2] > first[0]
    assert first != second  # two trainers that failed together do not retry together


@pytest.mark.parametrize("chunk", [0, -1])
def test_a_chunk_size_below_one_is_refused_naming_it_before_anything_is_sent(
    chunk: int, live_settings: Settings, redis_client: redis.Redis
) -> None:
    """It was range()'s ValueError (0) or an IndexError after sending nothing (-1)."""
    with LiveServer(live_settings) as server, SchedulerClient(server.url) as client:
        reports: list[Callable[[], object]] = [
            lambda: client.report_actuals(actual_history(steps=1, prompts=1, n=2), chunk=chunk),
            lambda: client.report_results(0, _finished(2), chunk=chunk),
        ]
        for report in reports:
            with pytest.raises(ValueError, match=f"chunk={chunk}"):
                report()
    assert redis_client.exists("rs:actuals") == 0

"""The client and the service's 504 ``deadline-exceeded``, as docs/client.md and docs/api.md's
"Errors" table give it: under a caller-chosen ``schedule_id`` it is retried like a 503, a fresh
attempt with a fresh deadline; without one it is raised at once, as a retry would publish twice.

A real server and Redis; the only thing played is the network, by a transport that lets the first
``POST /schedule`` arrive with a deadline of 1 ms (as one that waited that long for a plan slot
would), so the service refuses it with nothing written.
"""

from __future__ import annotations

import httpx
import pytest
import redis

from service.client import SchedulerAPIError, SchedulerClient
from service.client.wire import DEADLINE_HEADER
from service.settings import Settings
from tests.service.api_helpers import LiveServer, batch_body


class FirstDeadlinePasses(httpx.HTTPTransport):
    """Forwards every request; the first ``POST /schedule`` leaves with a 1 ms deadline, each later
    one with the client's own. Counts the ``POST /schedule`` attempts and their answers."""

    def __init__(self) -> None:
        super().__init__()
        self.statuses: list[int] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        scheduling = request.method == "POST" and request.url.path == "/schedule"
        if scheduling and not self.statuses:
            request.headers[DEADLINE_HEADER] = "1"
        response = super().handle_request(request)
        if scheduling:
            self.statuses.append(response.status_code)
        return response


def test_a_504_under_a_chosen_id_is_retried_and_the_step_published_once(
    live_settings: Settings, redis_client: redis.Redis
) -> None:
    transport = FirstDeadlinePasses()
    body = batch_body(schedule_id="late-once", policy="round_robin")
    with LiveServer(live_settings) as server, SchedulerClient(server.url, transport=transport) as client:
        answer = client.schedule(body, outage_s=30.0)
    assert transport.statuses == [504, 200]
    assert (answer.schedule_id, answer.published, answer.replayed) == ("late-once", True, False)
    assert redis_client.smembers(f"rs:step:{body.get('step', 0)}") == {"late-once"}


def test_a_504_without_an_id_is_raised_and_nothing_is_published(
    live_settings: Settings, redis_client: redis.Redis
) -> None:
    transport = FirstDeadlinePasses()
    with (
        LiveServer(live_settings) as server,
        SchedulerClient(server.url, transport=transport) as client,
        pytest.raises(SchedulerAPIError) as refused,
    ):
        client.schedule(batch_body(policy="round_robin"), outage_s=30.0)
    assert (refused.value.status, refused.value.problem["type"].rsplit("/", 1)[-1]) == (
        504,
        "deadline-exceeded",
    )
    assert transport.statuses == [504]
    assert redis_client.keys("rs:step:*") == []

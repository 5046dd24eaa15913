"""GET /schedule/{id} says which rules a step was planned by: the engine its plan was made for and
whether its sidecars admit by reserved KV. An operator who sees a step run slow reads there whether it
was planned for the engine the fleet runs; a step an older release published (no engine stored)
answers ``engine: null``, not a guess."""

from __future__ import annotations

import httpx
import pytest
import redis
from fastapi.testclient import TestClient

from scheduler.sim_rules import ENGINES
from service.client import SchedulerClient
from service.delivery.keys import ENGINE, schedule_keys
from service.engines import SERVICE_ENGINE
from tests.service.api_helpers import AppFactory, batch_body


@pytest.fixture
def client(module_app: TestClient, redis_client: redis.Redis) -> TestClient:
    """The module's one app (``module_app``), on a Redis flushed for the test:
    what progress shows is what Redis holds of the step."""
    return module_app


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_progress_names_the_engine_the_request_named(client: TestClient, engine: str) -> None:
    sid = client.post("/schedule", json=batch_body(engine=engine)).json()["schedule_id"]
    assert client.get(f"/schedule/{sid}").json()["engine"] == engine


def test_a_request_naming_no_engine_shows_the_engine_the_service_planned_it_for(
    make_client: AppFactory,
) -> None:
    """The service's default, as it was when the step was published: not whatever a reader assumes."""
    v0_fleet = make_client(default_engine="vllm-v0")
    sid = v0_fleet.post("/schedule", json=batch_body()).json()["schedule_id"]
    assert v0_fleet.get(f"/schedule/{sid}").json()["engine"] == "vllm-v0" != SERVICE_ENGINE


@pytest.mark.parametrize("kv_admission", [True, False])
def test_progress_says_whether_the_sidecars_admit_by_reserved_kv(
    client: TestClient, kv_admission: bool
) -> None:
    sid = client.post("/schedule", json=batch_body(kv_admission=kv_admission)).json()["schedule_id"]
    assert client.get(f"/schedule/{sid}").json()["kv_admission"] is kv_admission


def test_a_step_an_older_release_published_answers_a_null_engine_not_a_default(
    client: TestClient, redis_client: redis.Redis
) -> None:
    """That release stored no engine; which one its plan was made for is unknown here, and a default
    shown in its place would read as the rules it was planned by."""
    sid = client.post("/schedule", json=batch_body(engine="vllm-v0")).json()["schedule_id"]
    redis_client.hdel(schedule_keys(sid).meta, ENGINE)  # as that release stored it
    response = client.get(f"/schedule/{sid}")
    assert response.status_code == 200, response.text
    assert response.json()["engine"] is None
    assert response.json()["total"] == 32


def test_an_engine_a_newer_release_named_is_shown_as_stored(
    client: TestClient, redis_client: redis.Redis
) -> None:
    """This release knows no rules for it (the speed learner prices it by its default); progress
    says what the step was planned for all the same, and does not fail on it."""
    sid = client.post("/schedule", json=batch_body()).json()["schedule_id"]
    redis_client.hset(schedule_keys(sid).meta, ENGINE, "sglang")
    response = client.get(f"/schedule/{sid}")
    assert response.status_code == 200, response.text
    assert response.json()["engine"] == "sglang"


def test_the_client_reads_the_engine_and_admission_of_a_step(client: TestClient) -> None:
    sid = client.post("/schedule", json=batch_body(engine="vllm-v0", kv_admission=True)).json()["schedule_id"]

    def forward(request: httpx.Request) -> httpx.Response:
        answer = client.request(request.method, request.url.path)
        return httpx.Response(
            answer.status_code, headers={"content-type": "application/json"}, content=answer.content
        )

    with SchedulerClient("http://testserver", transport=httpx.MockTransport(forward)) as trainer:
        progress = trainer.progress(sid)
    assert (progress.engine, progress.kv_admission) == ("vllm-v0", True)


def test_the_openapi_schema_declares_both_and_a_null_engine(client: TestClient) -> None:
    """A client generated from /openapi.json must take the older release's null."""
    fields = client.get("/openapi.json").json()["components"]["schemas"]["ProgressResponse"]["properties"]
    assert {"type": "null"} in fields["engine"]["anyOf"]
    assert {"type": "boolean"} in fields["kv_admission"]["anyOf"]

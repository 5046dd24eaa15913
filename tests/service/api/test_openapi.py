"""The OpenAPI document tells a client what the service really answers, errors included."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from service.problems.table import PROBLEM_JSON
from tests.service.api_helpers import WORKER, batch_body


@pytest.fixture
def client(module_app: TestClient, redis_client: redis.Redis) -> TestClient:
    """The module's one app (``module_app``), on a Redis flushed for the test: the document is the app's
    routes', and each request below is refused from itself (its body, its token, an id never published)."""
    return module_app


def _operation(client: TestClient, method: str, path: str) -> dict[str, Any]:
    operation: dict[str, Any] = client.get("/openapi.json").json()["paths"][path][method]
    return operation


def test_every_documented_error_of_the_api_is_a_problem_document(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    errors = [
        (method, path, status, response)
        for path, operations in paths.items()
        if path != "/readyz"  # a probe's own JSON: {"ready": false, ...}
        for method, operation in operations.items()
        for status, response in operation["responses"].items()
        if int(status) >= 400
    ]
    assert len(errors) >= 20
    for method, path, status, response in errors:
        assert list(response["content"]) == [PROBLEM_JSON], (method, path, status)
        assert "detail" in response["content"][PROBLEM_JSON]["schema"]["properties"]


def _answers(client: TestClient, secured: TestClient) -> list[tuple[str, str, int]]:
    """(method, documented path, status) of requests that fail, each for a different reason."""
    bad_body = batch_body()
    bad_body["batch"]["items"][0]["n"] = 0
    calls = [
        ("post", "/schedule", client.post("/schedule", json=bad_body)),
        ("post", "/actuals", client.post("/actuals", content=b"\xff\xfe{", headers=_JSON)),
        ("post", "/schedule", secured.post("/schedule", json=batch_body())),
        ("post", "/schedule", secured.post("/schedule", json=batch_body(), headers=_bearer(WORKER))),
        ("get", "/schedule/{schedule_id}", client.get("/schedule/never-published")),
        ("delete", "/schedule/{schedule_id}", client.delete("/schedule/never-published")),
        ("delete", "/schedule/{schedule_id}", secured.delete("/schedule/x", headers=_bearer(WORKER))),
        ("get", "/schedule/{schedule_id}/results", client.get("/schedule/never-published/results")),
        ("get", "/schedule/{schedule_id}/results", client.get("/schedule/x/results?count=0")),
        ("post", "/actuals", client.post("/actuals", json={"actuals": []})),
        ("get", "/models", secured.get("/models")),
        ("post", "/models/retrain", client.post("/models/retrain")),
    ]
    return [(method, path, response.status_code) for method, path, response in calls]


_JSON = {"Content-Type": "application/json"}


def _bearer(tokens: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {tokens.split(',')[0]}"}


def test_every_error_the_service_answers_is_one_its_route_documents(
    client: TestClient, secured: TestClient
) -> None:
    answers = _answers(client, secured)
    assert {status for _, _, status in answers} == {400, 401, 403, 404, 409, 422}
    undocumented = [
        (method, path, status)
        for method, path, status in answers
        if str(status) not in _operation(client, method, path)["responses"]
    ]
    assert undocumented == []


def test_a_documented_problem_names_the_shape_handlers_send(client: TestClient) -> None:
    answer = client.post("/schedule", json={"batch": {"items": []}})
    body = answer.json()
    schema = _operation(client, "post", "/schedule")["responses"]["422"]["content"][PROBLEM_JSON]["schema"]
    assert answer.headers["content-type"].startswith(PROBLEM_JSON)
    assert set(body) <= set(schema["properties"])
    assert set(schema["required"]) <= set(body)


def test_the_header_a_replayed_schedule_answer_carries_is_declared_on_its_200(client: TestClient) -> None:
    first = client.post("/schedule", json=batch_body(schedule_id="declared-replay"))
    retry = client.post("/schedule", json=batch_body(schedule_id="declared-replay"))
    assert (retry.status_code, retry.json()["replayed"]) == (200, True)
    ours = set(retry.headers) - set(first.headers)  # what only a replay sends (lower case)
    ok = _operation(client, "post", "/schedule")["responses"]["200"]
    assert ok["content"]["application/json"]["schema"]["$ref"].endswith("/ScheduleResponse")
    declared = ok.get("headers", {})
    assert ours == {name.lower() for name in declared}
    for header in declared.values():
        assert header["schema"] == {"type": "string", "enum": ["true"]}
        assert "replayed" in header["description"]

"""An id refused for its characters is refused in words: the character at fault, where, and what an
id holds. The 422 read ``schedule_id='step#1': String should match pattern '^[A-Za-z0-9_.:-]+$'``,
a regular expression where a trainer wanted to know what was wrong with ``step#1`` (user67); the value
is still named once, by the detail's lead. The OpenAPI schema keeps the pattern (``test_openapi``).
"""

from __future__ import annotations

from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from tests.service.api_helpers import actual_report, batch_body

NAME = "an id holds only ASCII letters, digits and _ . : @ / + = -"
SCHEDULE_ID = "an id holds only ASCII letters, digits and _ . : -"


@pytest.fixture
def client(module_app: TestClient, redis_client: redis.Redis) -> TestClient:
    """The module's one app (``module_app``), on a Redis flushed for the test."""
    return module_app


def _schedule(**extra: Any) -> dict[str, Any]:
    return batch_body(prompts=1, n=1, workers=1, publish=False, **extra)


def _worker(worker_id: str) -> dict[str, Any]:
    body = _schedule()
    body["inventory"]["workers"][0]["worker_id"] = worker_id
    return body


CASES = {
    "a schedule id with #": (
        lambda c: c.post("/schedule", json=_schedule(schedule_id="step#1")),
        f"schedule_id='step#1': '#' (character 4) is not allowed: {SCHEDULE_ID}",
    ),
    "a worker id with a space": (
        lambda c: c.post("/schedule", json=_worker("gpu 0")),
        f"inventory.workers[0].worker_id='gpu 0': ' ' (character 3) is not allowed: {NAME}",
    ),
    "a prompt id with a newline at its end": (
        lambda c: c.post("/actuals", json={"actuals": [{**actual_report(1, 2, 3), "prompt_id": "p1\n"}]}),
        f"actuals[0].prompt_id='p1\\n': '\\n' (character 2) is not allowed: {NAME}",
    ),
    "a schedule id in the path": (
        lambda c: c.get("/schedule/step%20x"),
        f"schedule_id='step x': ' ' (character 4) is not allowed: {SCHEDULE_ID}",
    ),
}


@pytest.mark.parametrize(("call", "detail"), CASES.values(), ids=CASES.keys())
def test_an_id_s_characters_are_refused_in_words_naming_the_one_at_fault(
    client: TestClient, call: Any, detail: str
) -> None:
    response = call(client)
    assert response.status_code == 422
    assert response.json()["detail"] == detail
    [error] = response.json()["errors"]
    assert (error["message"], error["type"]) == (detail.partition(": ")[2], "string_pattern_mismatch")


def test_a_long_id_is_refused_for_its_length_first_as_before(client: TestClient) -> None:
    """Length before characters, pydantic's order and the push sidecar's (``service.names``)."""
    response = client.post("/schedule", json=_worker("w " * 200))
    assert response.json()["errors"][0]["message"] == "String should have at most 256 characters"

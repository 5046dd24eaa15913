"""A ``/schedule`` body without a ``step`` is step 0, as docs/api.md says (``0..2^31-1, default 0``),
and its answer names that step: the step a trainer that sends none is planned and counted at."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.service.api_helpers import batch_body


def test_a_schedule_without_a_step_is_step_0(client: TestClient) -> None:
    response = client.post("/schedule", json=batch_body(prompts=2, n=2, workers=1))
    assert response.status_code == 200, response.json()
    assert response.json()["step"] == 0

"""Bearer tokens and scopes: 401 without a known token, 403 for a worker token on trainer endpoints."""

from __future__ import annotations

import pytest
import redis
import typer
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from tests.service.api_helpers import TRAINER, WORKER, batch_body, bearer


def _actuals() -> dict[str, object]:
    return {
        "actuals": [
            {
                "step": 0,
                "prompt_id": "p0",
                "sample_idx": 0,
                "worker_id": "w0",
                "prompt_tokens": 100,
                "output_tokens": 300,
                "finish_reason": "stop",
                "wall_time_s": 3.0,
            }
        ]
    }


def test_a_request_without_a_token_is_401_with_a_bearer_challenge(secured: TestClient) -> None:
    response = secured.post("/schedule", json=batch_body())
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert response.headers["content-type"] == "application/problem+json"


@pytest.mark.parametrize("header", ["Bearer wrong", "Bearer ", "Basic dHJhaW5lcjpzZWNyZXQ=", TRAINER])
def test_a_wrong_or_malformed_token_is_401(secured: TestClient, header: str) -> None:
    response = secured.post("/schedule", json=batch_body(), headers={"Authorization": header})
    assert response.status_code == 401


def test_a_worker_token_on_schedule_is_403(secured: TestClient) -> None:
    response = secured.post("/schedule", json=batch_body(), headers=bearer(WORKER))
    assert response.status_code == 403
    assert response.json()["detail"] == "a worker token may not call /schedule; it needs a trainer token"


@pytest.mark.parametrize(
    ("path", "header", "status"),
    [
        ("/schedule", None, 401),
        ("/schedule", "Bearer nope", 401),
        ("/actuals", None, 401),
        ("/schedule", "worker", 403),
    ],
)
def test_the_token_is_judged_before_the_body(
    secured: TestClient, path: str, header: str | None, status: int
) -> None:
    headers = {"Content-Type": "application/json"}
    if header is not None:
        headers.update(bearer(WORKER) if header == "worker" else {"Authorization": header})
    response = secured.post(path, content=b"{not json", headers=headers)
    assert response.status_code == status


def test_a_worker_token_cannot_retrain(secured: TestClient) -> None:
    assert secured.post("/models/retrain", headers=bearer(WORKER)).status_code == 403


def test_a_worker_token_may_report_actuals_and_read_progress(secured: TestClient) -> None:
    assert secured.post("/actuals", json=_actuals(), headers=bearer(WORKER)).status_code == 200
    sid = secured.post("/schedule", json=batch_body(), headers=bearer(TRAINER)).json()["schedule_id"]
    assert secured.get(f"/schedule/{sid}", headers=bearer(WORKER)).status_code == 200


def test_a_trainer_token_may_schedule_and_report(secured: TestClient) -> None:
    assert secured.post("/schedule", json=batch_body(), headers=bearer(TRAINER)).status_code == 200
    assert secured.post("/actuals", json=_actuals(), headers=bearer(TRAINER)).status_code == 200


def test_auth_is_checked_before_the_body_is_judged(secured: TestClient) -> None:
    response = secured.post("/schedule", json={"garbage": True}, headers=bearer(WORKER))
    assert response.status_code == 403


def test_probes_and_metrics_need_no_token(secured: TestClient) -> None:
    assert secured.get("/healthz").status_code == 200
    assert secured.get("/readyz").status_code == 200
    assert secured.get("/metrics").status_code == 200


def test_serve_refuses_a_public_address_without_a_token(
    cli: typer.Typer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ROLLOUT_TRAINER_TOKENS", raising=False)
    monkeypatch.delenv("ROLLOUT_WORKER_TOKENS", raising=False)
    result = CliRunner().invoke(cli, ["serve", "--host", "0.0.0.0", "--port", "0"])
    assert result.exit_code != 0
    assert "token" in result.output.lower()
    assert "Traceback" not in result.output


def test_refused_callers_change_nothing_in_redis(secured: TestClient, redis_client: redis.Redis) -> None:
    before = sorted(str(k) for k in redis_client.keys("*"))
    assert secured.post("/schedule", json=batch_body()).status_code == 401
    assert secured.post("/schedule", json=batch_body(), headers=bearer(WORKER)).status_code == 403
    assert secured.post("/actuals", json=_actuals(), headers=bearer("nope")).status_code == 401
    assert secured.post("/models/retrain", headers=bearer(WORKER)).status_code == 403
    assert sorted(str(k) for k in redis_client.keys("*")) == before

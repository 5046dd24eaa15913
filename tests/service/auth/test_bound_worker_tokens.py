"""A worker token bound to worker ids (``worker_id=token``) reports actuals only for those workers.

A refused batch stores nothing (every key's content and expiry compared, as the bad-input tests do);
a trainer token and an unbound (plain) worker token still report for any worker.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import redis
import typer
from fastapi.testclient import TestClient
from pydantic import SecretStr, ValidationError
from typer.testing import CliRunner

from service.auth.worker_tokens import WorkerToken, parse_worker_tokens, unbound_warning
from service.client import SchedulerAPIError, SchedulerClient
from service.delivery import Delivery
from service.settings import Settings
from tests.service.api.badinput import redis_snapshot
from tests.service.api_helpers import (
    TRAINER,
    AppFactory,
    LiveServer,
    actual_report,
    batch_body,
    bearer,
    with_settings,
)
from tests.service.step_workers import waited_while_worked

W0, W1, NODE = "token-of-w0", "token-of-w1", "token-of-node"
BOUND = f"w0={W0}, w1={W1}, w2={NODE}, w3={NODE}"  # a node agent's token bound to w2 and w3


@pytest.fixture
def bound(make_client: AppFactory) -> TestClient:
    """An app whose worker tokens are each bound to their workers."""
    return make_client(trainer_tokens=TRAINER, worker_tokens=BOUND)


def _reports(*workers: str) -> dict[str, Any]:
    return {"actuals": [actual_report(0, p, 0, worker=w) for p, w in enumerate(workers)]}


def test_a_bound_token_reports_for_its_own_workers(bound: TestClient) -> None:
    assert bound.post("/actuals", json=_reports("w0", "w0"), headers=bearer(W0)).status_code == 200
    response = bound.post("/actuals", json=_reports("w2", "w3"), headers=bearer(NODE))
    assert response.status_code == 200, response.text
    assert response.json()["accepted"] == 2


def test_a_report_for_another_worker_is_403_naming_the_worker_id_and_its_value(bound: TestClient) -> None:
    response = bound.post("/actuals", json=_reports("w0", "w1"), headers=bearer(W0))
    assert response.status_code == 403
    problem = response.json()
    assert (problem["field"], problem["value"]) == ("actuals[1].worker_id", "w1")
    assert "bound to w0" in problem["detail"]


@pytest.mark.parametrize(
    ("token", "own", "workers"), [(W0, ["w0"], ("w0", "w1", "w0")), (NODE, ["w2", "w3"], ("w2", "w0", "w3"))]
)
def test_a_batch_mixing_own_and_foreign_workers_stores_nothing(
    bound: TestClient, redis_client: redis.Redis, token: str, own: list[str], workers: tuple[str, ...]
) -> None:
    assert bound.post("/actuals", json=_reports(*own), headers=bearer(token)).status_code == 200
    before = redis_snapshot(redis_client)  # its own workers' actuals and learned speeds among them
    mixed = {"actuals": [actual_report(1, p, 1, worker=w, slowdown=3.0) for p, w in enumerate(workers)]}
    assert bound.post("/actuals", json=mixed, headers=bearer(token)).status_code == 403
    assert redis_snapshot(redis_client) == before


@pytest.mark.parametrize("token", [TRAINER, "plain-worker-token"])
def test_a_trainer_or_an_unbound_worker_token_reports_for_any_worker(
    make_client: AppFactory, token: str
) -> None:
    app = make_client(trainer_tokens=TRAINER, worker_tokens=f"plain-worker-token,{BOUND}")
    assert app.post("/actuals", json=_reports("w0", "w1", "w9"), headers=bearer(token)).status_code == 200


def test_a_bound_token_keeps_the_worker_scope_elsewhere(bound: TestClient) -> None:
    assert bound.post("/schedule", json=batch_body(), headers=bearer(W0)).status_code == 403
    sid = bound.post("/schedule", json=batch_body(), headers=bearer(TRAINER)).json()["schedule_id"]
    assert bound.get(f"/schedule/{sid}", headers=bearer(W0)).status_code == 200


def test_entries_read_as_plain_or_bound_tokens() -> None:
    assert parse_worker_tokens(" a ,w0 = b,w0=c , w1=b,") == [
        WorkerToken("a", None),
        WorkerToken("b", "w0"),
        WorkerToken("c", "w0"),
        WorkerToken("b", "w1"),
    ]


def test_a_worker_id_holding_an_equals_sign_is_bound_by_the_last_one() -> None:
    """A token holds no '=', so the last one ends the worker id: ids the API takes ("a=b", by its
    name rule) had been refused as "more than one '='", leaving such a worker no bound token."""
    assert parse_worker_tokens("rack=1/gpu0=tok") == [WorkerToken("tok", "rack=1/gpu0")]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("ok,padded==", "entry 2 has no token after its last '='"),  # a padded base64 token: no binding
        ("w0=tok=", "entry 1 has no token after its last '='"),
        ("w0=", "entry 1 has no token after its last '='"),
        ("bad id=tok", "entry 1: the part before the last '=' is not a worker id"),
        ("bad id=x=tok", "entry 1: the part before the last '=' is not a worker id"),
        ("=tok", "entry 1: the part before the last '=' is not a worker id"),
        ("w0=t\u00e9st", "printable ASCII"),
        ("tok,w0=tok", "both unbound and bound"),
    ],
)
def test_an_entry_that_cannot_be_a_worker_token_is_refused_at_start(value: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Settings(worker_tokens=SecretStr(value))


def test_a_bound_token_also_in_the_trainer_list_is_refused() -> None:
    with pytest.raises(ValidationError, match="in both"):
        Settings(trainer_tokens=SecretStr("same"), worker_tokens=SecretStr("w0=same"))


def test_a_refused_entry_never_shows_its_text(cli: typer.Typer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLLOUT_WORKER_TOKENS", "w0=s3cret,bad id=s3cret")
    result = CliRunner().invoke(cli, ["serve"])
    assert result.exit_code == 2
    assert "entry 2" in result.stderr
    assert "s3cret" not in result.output
    assert "bad id" not in result.output


def test_serve_warns_about_unbound_worker_tokens_only() -> None:
    assert unbound_warning(parse_worker_tokens(BOUND)) is None
    warning = unbound_warning(parse_worker_tokens(f"plain-a,plain-b,{BOUND}"))
    assert warning is not None
    assert "2 unbound" in warning


def test_the_step_loop_reports_every_worker_with_the_trainer_token_and_one_worker_only_with_its_own(
    live_settings: Settings, redis_client: redis.Redis
) -> None:
    """Sidecars complete through Redis, never the API; the trainer reports the step's results (every
    worker's) with its token. A worker-side reporter holding w0's bound token reports w0's only."""
    settings = with_settings(live_settings, trainer_tokens=TRAINER, worker_tokens=BOUND)
    with LiveServer(settings) as server, SchedulerClient(server.url, token=TRAINER) as trainer:
        plan = trainer.schedule(batch_body(prompts=4, n=4, workers=2, policy="round_robin"))
        finished = waited_while_worked(trainer, Delivery(redis_client), plan)
        lengths = {f"p{p}": 100 + 10 * p for p in range(4)}
        with SchedulerClient(server.url, token=W0) as worker:
            with pytest.raises(SchedulerAPIError) as refused:
                worker.report_results(0, finished, prompt_tokens=lengths)  # w1's results too
            assert refused.value.status == 403
            assert refused.value.problem["value"] == "w1"
            own = [r for r in finished.results if r.worker_id == "w0"]
            mine = worker.report_results(0, dataclasses.replace(finished, results=own), prompt_tokens=lengths)
            assert mine is not None
            assert mine.accepted == len(own) > 0
        accepted = trainer.report_results(0, finished, prompt_tokens=lengths)
        assert accepted is not None
        assert (accepted.accepted, accepted.repeated) == (len(finished.results) - len(own), len(own))


def test_the_token_lists_are_read_when_the_app_is_built_not_at_every_request(
    make_client: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every authenticated request parsed both lists again (each entry checked, each worker id
    validated); they are settings, fixed for the app's life, so the app reads them once."""
    app = make_client(trainer_tokens=TRAINER, worker_tokens=BOUND)

    def unexpected(*_: object) -> object:
        raise AssertionError("a token list was parsed while serving a request")

    monkeypatch.setattr("service.settings.parse_worker_tokens", unexpected)
    monkeypatch.setattr("service.settings._split", unexpected)
    report = actual_report(0, 0, 0, worker="w0")
    assert app.post("/actuals", json={"actuals": [report]}, headers=bearer(W0)).status_code == 200
    assert app.post("/actuals", json={"actuals": [report]}, headers=bearer(TRAINER)).status_code == 200
    assert app.get("/models", headers=bearer("nobody")).status_code == 401

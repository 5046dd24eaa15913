"""A Redis with ACL users: credentials from the URL or from settings; a wrong password is a clear 503."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient
from pydantic import SecretStr

from service.app import create_app
from service.embedded import EmbeddedServer
from service.logs import JsonFormatter
from service.redis_conn import RedisRefusedError, describe
from service.settings import Settings
from service.sidecar.launch import SidecarOptions, connect
from tests.service.api_helpers import actual_history, batch_body


@pytest.fixture(scope="module")
def acl_redis() -> Iterator[EmbeddedServer]:
    with EmbeddedServer() as server:
        admin = redis.Redis(host="127.0.0.1", port=server.port)
        admin.acl_setuser(
            "scheduler", enabled=True, passwords=["+s3cret"], keys=["*"], channels=["*"], commands=["+@all"]
        )
        admin.acl_setuser(
            "no-scripts",
            enabled=True,
            passwords=["+s3cret"],
            keys=["*"],
            channels=["*"],
            commands=["+@all", "-evalsha", "-eval"],
        )
        admin.acl_setuser("default", enabled=False)  # from now on, nobody gets in without credentials
        admin.close()
        yield server


def _port(server: EmbeddedServer) -> int:
    return server.port


def test_credentials_in_the_url_authenticate(acl_redis: EmbeddedServer, tmp_path: Path) -> None:
    url = f"redis://scheduler:s3cret@127.0.0.1:{_port(acl_redis)}/0"
    with TestClient(create_app(Settings(redis_url=url, model_dir=str(tmp_path)))) as client:
        assert client.post("/schedule", json=batch_body()).status_code == 200


def test_credentials_in_settings_authenticate(acl_redis: EmbeddedServer, tmp_path: Path) -> None:
    settings = Settings(
        redis_url=f"redis://127.0.0.1:{_port(acl_redis)}/0",
        redis_username="scheduler",
        redis_password=SecretStr("s3cret"),
        model_dir=str(tmp_path),
    )
    with TestClient(create_app(settings)) as client:
        assert client.get("/readyz").status_code == 200


def test_a_wrong_password_is_a_503_that_says_why(acl_redis: EmbeddedServer, tmp_path: Path) -> None:
    url = f"redis://scheduler:wrong@127.0.0.1:{_port(acl_redis)}/0"
    settings = Settings(redis_url=url, model_dir=str(tmp_path))
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        response = client.post("/schedule", json=batch_body())
        assert response.status_code == 503
        assert "AuthenticationError" in response.json()["detail"]
        ready = client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["redis"].startswith("refused:")  # not an outage to wait out


def test_logged_urls_hide_the_password() -> None:
    assert describe("rediss://scheduler:s3cret@redis:6380/0") == "rediss://scheduler:***@redis:6380/0"
    assert describe("redis://:s3cret@redis:6379/0") == "redis://***@redis:6379/0"
    assert describe("redis://redis:6379/0") == "redis://redis:6379/0"
    assert describe("scheduler:s3cret@redis:6379") == "scheduler:***@redis:6379"  # no scheme: still masked


def test_a_user_without_a_needed_command_gets_a_503_naming_the_refusal_not_a_500(
    acl_redis: EmbeddedServer, tmp_path: Path
) -> None:
    url = f"redis://no-scripts:s3cret@127.0.0.1:{_port(acl_redis)}/0"
    with TestClient(
        create_app(Settings(redis_url=url, model_dir=str(tmp_path))), raise_server_exceptions=False
    ) as client:
        response = client.post("/schedule", json=batch_body())
        assert response.status_code == 503
        assert response.json()["type"].endswith("/redis-refused")
        assert "NoPermissionError" in response.json()["detail"]


def test_a_sidecar_takes_the_acl_user_from_its_setting_as_the_service_does(acl_redis: EmbeddedServer) -> None:
    options = SidecarOptions(
        worker_id="w0",
        redis_url=f"redis://127.0.0.1:{_port(acl_redis)}/0",
        redis_username="scheduler",
        redis_password="s3cret",
    )
    assert connect(options).client.ping()


def test_a_sidecar_whose_credentials_are_refused_stops_with_one_line(acl_redis: EmbeddedServer) -> None:
    # it used to log 'redis unavailable' for ever while its liveness probe said ok
    options = SidecarOptions(
        worker_id="w0", redis_url=f"redis://127.0.0.1:{_port(acl_redis)}/0", redis_password="wrong"
    )
    with pytest.raises(RedisRefusedError, match="refused our credentials"):
        connect(options)


def test_no_log_line_of_a_whole_step_shows_the_redis_password_or_a_token(
    acl_redis: EmbeddedServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Start-up, a schedule, its actuals, a retrain, refused tokens and a refused Redis user: every
    line, extras included, as the JSON formatter writes it."""
    url = f"redis://scheduler:s3cret@127.0.0.1:{_port(acl_redis)}/0"

    def settings(redis_url: str) -> Settings:
        return Settings(
            redis_url=redis_url,
            model_dir=str(tmp_path),
            trainer_tokens=SecretStr("trainer-t0ken"),
            worker_tokens=SecretStr("worker-t0ken"),
        )

    trainer = {"Authorization": "Bearer trainer-t0ken"}
    with caplog.at_level(logging.DEBUG, logger="service"):
        with TestClient(create_app(settings(url))) as client:
            step = client.post("/schedule", json=batch_body(step=0), headers=trainer).json()["schedule_id"]
            reports = [{**report, "schedule_id": step} for report in actual_history(steps=2)]
            client.post("/actuals", json={"actuals": reports}, headers=trainer)
            client.post("/models/retrain", headers=trainer)
            client.post("/schedule", json=batch_body(), headers={"Authorization": "Bearer worker-t0ken"})
            client.post(
                "/schedule?token=trainer-t0ken", json=batch_body(), headers={"Authorization": "Bearer x"}
            )
        wrong = settings(url.replace("s3cret", "wr0ng-s3cret"))
        with TestClient(create_app(wrong), raise_server_exceptions=False) as client:
            client.post("/schedule", json=batch_body(), headers=trainer)
    written = "\n".join(JsonFormatter().format(record) for record in caplog.records)
    assert "actuals stored" in written  # the step was logged
    assert "retrain done" in written
    for secret in ("s3cret", "t0ken"):
        assert secret not in written


def test_a_request_redis_refuses_is_one_error_line_naming_the_refusal_not_a_second_request_failed(
    acl_redis: EmbeddedServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """It logged the error for the operator and then the 503's "request failed": one failure twice."""
    url = f"redis://scheduler:wrong@127.0.0.1:{_port(acl_redis)}/0"
    with TestClient(
        create_app(Settings(redis_url=url, model_dir=str(tmp_path))), raise_server_exceptions=False
    ) as client:
        caplog.clear()  # start-up's lines about the refused user are not the request's
        with caplog.at_level(logging.INFO):
            assert client.get("/schedule/run-1-step-0").status_code == 503
    # the request's lines; the reaper's background pass meets the refusal too and says so itself
    [line] = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name == "service.problems"]
    assert line.levelname == "ERROR"
    assert line.getMessage().startswith("Redis refused the service's user")
    assert line.__dict__["schedule_id"] == "run-1-step-0"  # the request's step, as "request failed" had

"""deploy/compose.yaml's Redis users, for real: the aclfile its ``redis-users`` one-shot writes (the
exact command and environment the file gives it) loaded by valkey-server with the file's own flags, then
each process of the loop logging in with the user and password the file gives it.

No container engine here: the one-shot runs through the CLI, the volume is a temp dir.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
import typer
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.deploy.aclfile_server import aclfile_server, anonymous_ping
from tests.deploy.compose_redis import compose_services, redis_flags, write_aclfile

NO_RETRY = Retry(NoBackoff(), 0)  # a refused login raises at once (``_client``'s docstring)
SIDECARS = ["sidecar-h100-0", "sidecar-h100-1", "sidecar-ascend-0", "sidecar-ascend-1"]


def _login(services: dict[str, dict[str, Any]], name: str) -> tuple[str, str]:
    env = services[name]["environment"]
    return str(env["ROLLOUT_REDIS_USERNAME"]), str(env["ROLLOUT_REDIS_PASSWORD"])


@pytest.fixture(scope="module")
def loop_redis(
    cli: typer.Typer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[int, dict[str, Any]]]:
    """The loop's Redis, started as compose starts it, and the compose services."""
    services = compose_services()
    aclfile = write_aclfile(cli, services, tmp_path_factory.mktemp("compose-acl"))
    with aclfile_server(aclfile, *redis_flags(services)) as port:
        yield port, services


def _client(port: int, user: str | None, password: str) -> redis.Redis:
    """A client of ``user``, without redis-py's default retries: a refused login is an
    ``AuthenticationError``, a ``ConnectionError`` the default retries 3 times more after 1-10 s
    backoffs, which made each refusal this module asserts cost 2-4 s, and the same error in the end."""
    return redis.Redis(port=port, username=user, password=password, decode_responses=True, retry=NO_RETRY)


def test_the_loop_redis_refuses_anonymous_clients_and_admits_its_health_check(
    loop_redis: tuple[int, dict[str, Any]],
) -> None:
    port, services = loop_redis
    assert anonymous_ping(port).startswith(b"-NOAUTH")
    with _client(port, None, services["redis"]["environment"]["REDISCLI_AUTH"]) as default:
        assert default.config_get("appendonly") == {"appendonly": "yes"}


def test_the_service_logs_in_as_the_service_user_and_may_run_what_only_it_runs(
    loop_redis: tuple[int, dict[str, Any]],
) -> None:
    port, services = loop_redis
    user, password = _login(services, "scheduler")
    with _client(port, user, password) as service:
        assert user == "rollout-service"
        assert service.ping()
        assert service.sadd("rs:step:x", "a") == 1  # the step index: the service's alone


@pytest.mark.parametrize("name", SIDECARS)
def test_each_sidecar_logs_in_as_the_sidecar_user_and_may_not_run_the_service_s_commands(
    loop_redis: tuple[int, dict[str, Any]], name: str
) -> None:
    port, services = loop_redis
    user, password = _login(services, name)
    with _client(port, user, password) as sidecar:
        assert user == "rollout-sidecar"
        assert sidecar.ping()
        assert sidecar.set("rs:presence:x", "1")
        with pytest.raises(redis.exceptions.NoPermissionError):
            sidecar.smembers("rs:step:x")
        with pytest.raises(redis.exceptions.NoPermissionError):
            sidecar.set("other:x", "1")  # outside the loop's prefix
    with pytest.raises(redis.exceptions.AuthenticationError):
        _client(port, "rollout-service", password).ping()

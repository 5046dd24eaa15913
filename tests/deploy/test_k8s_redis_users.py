"""The Kubernetes manifests' two Redis users: the service Deployment logs in as ``rollout-service``,
every worker pod's sidecar as ``rollout-sidecar``, each with a password of its own from the Secret.

A worker pod runs an engine serving any caller that holds its key and code we do not control; what it
can read from its environment is what a compromise of it can do to Redis. The second half loads the
lines ``rollout-scheduler redis-acl`` prints (the documented step, for the ConfigMap's prefix and mode)
into a real valkey-server and logs in as each container's environment would.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
import typer
from redis.backoff import NoBackoff
from redis.retry import Retry

from service.delivery.acl import SERVICE, SIDECAR
from tests.deploy.acl_loop import PASSWORDS, AclServer, acl_server, generated_lines
from tests.deploy.manifests import (
    Doc,
    container_environment,
    containers_of,
    find_one,
    pod_spec,
    workloads,
)

NO_RETRY = Retry(NoBackoff(), 0)  # a refused login raises at once (``_client``'s docstring)
STATEFULSETS = ["rollout-worker-h100", "rollout-worker-ascend"]
# Stand-ins for the Secret's keys; the two users' passwords as the operator gave them to redis-acl
# (``generated_lines`` passes ``PASSWORDS``).
SECRET = {
    "trainer-tokens": "t" * 64,
    "worker-tokens": "w" * 64,
    "redis-service-password": PASSWORDS[SERVICE.password_env],
    "redis-sidecar-password": PASSWORDS[SIDECAR.password_env],
    "engine-api-key": "k",
}


def _service() -> Doc:
    return containers_of(find_one("Deployment", "rollout-scheduler"))["service"]


def _sidecar(statefulset: str) -> Doc:
    return containers_of(find_one("StatefulSet", statefulset))["sidecar"]


def _secret_keys(container: Doc) -> set[str]:
    """The Secret keys ``container`` reads, by ``env`` or ``envFrom``."""
    keys = {
        str(var["valueFrom"]["secretKeyRef"]["key"])
        for var in container.get("env", [])
        if "secretKeyRef" in var.get("valueFrom", {})
    }
    assert not [ref for ref in container.get("envFrom", []) if "secretRef" in ref], "the whole Secret"
    return keys


def _login(container: Doc, fields: dict[str, str] | None = None) -> tuple[str, str]:
    env = container_environment(container, SECRET, fields)
    return env["ROLLOUT_REDIS_USERNAME"], env["ROLLOUT_REDIS_PASSWORD"]


def test_no_worker_pod_gets_the_service_s_redis_password() -> None:
    service_key = next(
        var["valueFrom"]["secretKeyRef"]["key"]
        for var in _service()["env"]
        if var["name"] == "ROLLOUT_REDIS_PASSWORD"
    )
    for doc in workloads():
        if doc["kind"] != "StatefulSet":
            continue
        for container in pod_spec(doc)["containers"]:
            assert service_key not in _secret_keys(container), (doc["metadata"]["name"], container["name"])


def test_the_service_and_the_sidecars_log_in_as_two_users_with_two_passwords() -> None:
    service = _login(_service())
    sidecars = {_login(_sidecar(name), {"metadata.name": f"{name}-0"}) for name in STATEFULSETS}
    assert service == ("rollout-service", SECRET["redis-service-password"])
    assert sidecars == {("rollout-sidecar", SECRET["redis-sidecar-password"])}


def test_the_secret_holds_each_password_the_pods_read_and_no_redis_admin_login() -> None:
    """No pod needs the admin login that creates the users: kept out, no pod can leak it."""
    keys = set(find_one("Secret", "rollout-scheduler")["stringData"])
    assert {"redis-service-password", "redis-sidecar-password"} <= keys
    assert "redis-password" not in keys, "the old shared password, the default user's"


@pytest.fixture(scope="module")
def redis_users(cli: typer.Typer) -> Iterator[AclServer]:
    """A server with the users the documented step creates for the ConfigMap's prefix and mode."""
    data = find_one("ConfigMap", "rollout-scheduler")["data"]
    args = ["--prefix", data["ROLLOUT_KEY_PREFIX"]]
    args += ["--cluster"] if data["ROLLOUT_REDIS_CLUSTER"] == "true" else []
    with acl_server(generated_lines(cli, *args)) as server:
        yield server


def _client(server: AclServer, login: tuple[str, str]) -> redis.Redis:
    """A client of ``login``, without redis-py's default retries: a refused login is an
    ``AuthenticationError``, a ``ConnectionError`` the default retries 3 times more after 1-10 s
    backoffs, which made each refusal this module asserts cost 2-4 s, and the same error in the end."""
    user, password = login
    return redis.Redis(
        port=server.port, username=user, password=password, decode_responses=True, retry=NO_RETRY
    )


def test_the_service_pod_s_login_may_run_what_only_the_service_runs(redis_users: AclServer) -> None:
    prefix = find_one("ConfigMap", "rollout-scheduler")["data"]["ROLLOUT_KEY_PREFIX"]
    with _client(redis_users, _login(_service())) as service:
        assert service.sadd(f"{prefix}:step:x", "a") == 1


@pytest.mark.parametrize("statefulset", STATEFULSETS)
def test_a_worker_pod_s_login_may_lease_but_not_run_the_service_s_commands(
    redis_users: AclServer, statefulset: str
) -> None:
    prefix = find_one("ConfigMap", "rollout-scheduler")["data"]["ROLLOUT_KEY_PREFIX"]
    login = _login(_sidecar(statefulset), {"metadata.name": f"{statefulset}-0"})
    with _client(redis_users, login) as sidecar:
        assert sidecar.set(f"{prefix}:presence:x", "1")
        with pytest.raises(redis.exceptions.NoPermissionError):
            sidecar.smembers(f"{prefix}:step:x")
    with pytest.raises(redis.exceptions.AuthenticationError):
        _client(redis_users, ("rollout-service", login[1])).ping()

"""What the generated users may not do: the commands a stolen sidecar credential was worth, keys
outside the deployment's prefix, other prefixes, and the same through a Lua script."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
import typer
from redis.backoff import NoBackoff
from redis.retry import Retry
from typer.testing import CliRunner

from service.delivery.acl import SERVICE, SIDECAR
from tests.deploy.acl_loop import PASSWORDS, AclServer, acl_server, generated_lines

NO_RETRY = Retry(NoBackoff(), 0)  # a refused login raises at once (``_login``'s docstring)
DANGEROUS = (
    ("FLUSHALL",),
    ("FLUSHDB",),
    ("CONFIG", "SET", "maxmemory", "1"),
    ("CONFIG", "GET", "requirepass"),
    ("KEYS", "*"),
    ("SCAN", "0"),
    ("DEBUG", "SLEEP", "0"),
    ("SHUTDOWN", "NOSAVE"),
    ("ACL", "SETUSER", "rollout-sidecar", "+@all"),
    ("MONITOR",),
    ("CLIENT", "KILL", "TYPE", "normal"),
    ("PUBLISH", "rs:channel", "x"),
)
IN_SCRIPT = "ACL failure in script"  # a script's refused command or key: an error reply of its own


@pytest.fixture(scope="module")
def acl(cli: typer.Typer) -> Iterator[AclServer]:
    # DEBUG on for local connections (valkey's default refuses it before any ACL): the ACL must refuse it
    with acl_server(generated_lines(cli, "--prefix", "rs"), "--enable-debug-command", "local") as server:
        yield server


def _login(acl: AclServer, user: str, password: str) -> redis.Redis:
    """A client of ``user``, without redis-py's default retries: a refused login is an
    ``AuthenticationError``, a ``ConnectionError`` the default retries 3 times more after 1-10 s
    backoffs, which made each refusal this module asserts cost 2-4 s, and the same error in the end."""
    return redis.Redis(
        host="127.0.0.1",
        port=acl.port,
        username=user,
        password=password,
        decode_responses=True,
        retry=NO_RETRY,
    )


@pytest.fixture(params=[SIDECAR, SERVICE], ids=lambda role: role.name)
def user(request: pytest.FixtureRequest, acl: AclServer) -> Iterator[redis.Redis]:
    client = _login(acl, request.param.default_user, PASSWORDS[request.param.password_env])
    yield client
    client.close()


@pytest.mark.parametrize("command", DANGEROUS, ids=lambda command: " ".join(command[:2]))
def test_neither_user_may_run_a_server_wide_or_dangerous_command(
    user: redis.Redis, acl: AclServer, command: tuple[str, ...]
) -> None:
    with pytest.raises(redis.exceptions.NoPermissionError):
        user.execute_command(*command)  # type: ignore[no-untyped-call]  # redis-py untyped
    assert acl.admin.ping()  # SHUTDOWN and DEBUG were refused, not run


def test_neither_user_may_run_such_a_command_from_a_script(user: redis.Redis) -> None:
    with pytest.raises(redis.ResponseError, match=IN_SCRIPT):
        user.eval("return redis.call('FLUSHALL')", 0)


@pytest.mark.parametrize("key", ["other:key", "rsx:key", "tenant-b:rs:key", "rs", "{rs}:key"])
def test_neither_user_may_touch_a_key_outside_the_prefix(user: redis.Redis, key: str) -> None:
    with pytest.raises(redis.exceptions.NoPermissionError):
        user.set(key, "x")
    with pytest.raises(redis.exceptions.NoPermissionError):
        user.get(key)


def test_a_script_is_held_to_the_callers_keys_too(user: redis.Redis) -> None:
    """Redis 7 checks what a script touches against its caller: EVAL widens nothing."""
    with pytest.raises(redis.exceptions.NoPermissionError):  # a declared key: refused before it runs
        user.eval("return redis.call('SET', KEYS[1], 'x')", 1, "other:key")
    with pytest.raises(redis.ResponseError, match=IN_SCRIPT):  # a key the script names itself
        user.eval("return redis.call('SET', 'other:key', 'x')", 0)


def test_keys_under_the_prefix_are_the_users_own(user: redis.Redis, acl: AclServer) -> None:
    assert user.set("rs:acl-probe", "x")
    assert user.get("rs:acl-probe") == "x"
    assert user.eval("return redis.call('GET', KEYS[1])", 1, "rs:acl-probe") == "x"
    acl.admin.delete("rs:acl-probe")


def test_the_sidecar_user_may_not_read_the_trainers_results_pages_or_the_actuals_log(acl: AclServer) -> None:
    """It writes the results stream (a completion) but reads no stream: XRANGE, XREAD are the service's."""
    sidecar = _login(acl, SIDECAR.default_user, PASSWORDS[SIDECAR.password_env])
    with pytest.raises(redis.exceptions.NoPermissionError):
        sidecar.xrange("rs:actuals")
    with pytest.raises(redis.exceptions.NoPermissionError):
        sidecar.xread({"rs:{s}:results": "0"})
    sidecar.close()


def test_a_user_printed_without_a_password_logs_no_one_in(cli: typer.Typer) -> None:
    result = CliRunner().invoke(cli, ["redis-acl"], env=dict.fromkeys(PASSWORDS, ""))
    lines = [line for line in result.stdout.splitlines() if line.startswith("ACL SETUSER")]
    with acl_server(lines) as server:
        for role in (SERVICE, SIDECAR):
            with pytest.raises(redis.exceptions.AuthenticationError):
                _login(server, role.default_user, "").ping()
            with pytest.raises(redis.exceptions.AuthenticationError):
                _login(server, role.default_user, "anything").ping()

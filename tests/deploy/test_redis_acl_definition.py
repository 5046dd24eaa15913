"""The one definition of the Redis users (``service/delivery/acl.py``) against the code and the server,
and ``rollout-scheduler redis-acl``, which prints it.

Redis 7 checks each command a Lua script runs against the user that called the script, so a command
only a rare branch of a script runs (a lease lapsed, a group's last item) is refused there in
production, not in the loop test: each role holds every command the scripts it may call name.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
import redis
import typer
from typer.testing import CliRunner

from service.commands import redis_acl
from service.delivery.acl import DEFAULT_PASSWORD_ENV as ADMIN_ENV
from service.delivery.acl import SERVICE, SERVICE_COMMANDS, SIDECAR, SIDECAR_COMMANDS, SIDECAR_SCRIPTS
from service.delivery.scripts import OPERATIONS, script_source
from tests.deploy.acl_loop import PASSWORDS
from tests.deploy.aclfile_server import aclfile_server, anonymous_ping

ROOT = Path(__file__).resolve().parents[2]
SERVICE_CODE = ROOT / "service"
# A script's command, and its subcommand where the first is a container (``XINFO STREAM``)
LUA_CALL = re.compile(r"redis\.p?call\(\s*['\"]([A-Za-z]+)['\"](?:\s*,\s*['\"]([A-Za-z]+)['\"])?")
CONTAINERS = {"xinfo", "client", "script", "config", "object", "memory", "xgroup"}
SHIPPED = ROOT / "deploy" / "redis" / "users.acl"


def named_by_scripts(paths: list[Path]) -> set[str]:
    """Every command the Lua in ``paths`` (``.lua`` files, Python modules holding Lua) runs."""
    named = set()
    for path in paths:
        for command, sub in LUA_CALL.findall(path.read_text()):
            command = command.lower()
            named.add(f"{command}|{sub.lower()}" if command in CONTAINERS and sub else command)
    return named


def _run(cli: typer.Typer, *args: str, env: dict[str, str] | None = None) -> tuple[int, list[str], str]:
    result = CliRunner().invoke(
        cli, ["redis-acl", *args], env={**dict.fromkeys([*PASSWORDS, ADMIN_ENV], ""), **(env or {})}
    )
    return result.exit_code, result.stdout.splitlines(), result.stderr


def test_the_sidecar_holds_every_command_the_scripts_it_may_run_name(tmp_path: Path) -> None:
    """The delivery scripts it calls (``common.lua`` and ``index.lua`` before each), its own one-line
    scripts and the lease clock's (``delivery/views.py``)."""
    for operation in SIDECAR_SCRIPTS:
        (tmp_path / f"{operation}.lua").write_text(script_source(operation))
    sources = [
        *tmp_path.glob("*.lua"),
        *(SERVICE_CODE / "sidecar").rglob("*.py"),
        SERVICE_CODE / "delivery" / "views.py",
    ]
    named = named_by_scripts(sources)
    assert {"hget", "zadd", "xadd", "time", "del"} <= named  # the pattern still reads the scripts
    assert named - set(SIDECAR_COMMANDS) == set()


def test_the_sidecar_calls_no_delivery_script_but_those(tmp_path: Path) -> None:
    """What ``SIDECAR_SCRIPTS`` leaves out is the service's: publish, cancel, planning marks."""
    assert set(OPERATIONS) - set(SIDECAR_SCRIPTS) == {"publish", "cancel", "planning"}
    calls = "\n".join(path.read_text() for path in (SERVICE_CODE / "sidecar").rglob("*.py"))
    for operation in ("publish", "cancel", "mark_planning", "announce", "enter_step", "enter_planning"):
        assert f"delivery.{operation}(" not in calls


def test_the_service_holds_every_command_any_script_of_ours_names() -> None:
    named = named_by_scripts([*SERVICE_CODE.rglob("*.lua"), *SERVICE_CODE.rglob("*.py")])
    assert {"xinfo|stream", "incr", "expire"} <= named  # the actuals log's and the retrain lock's
    assert named - set(SERVICE_COMMANDS) == set()


def test_the_only_dangerous_command_either_user_holds_is_the_version_checks_info(
    redis_client: redis.Redis,
) -> None:
    dangerous = set(redis_client.acl_cat("dangerous"))
    for role in (SERVICE, SIDECAR):
        assert {command.split("|")[0] for command in role.commands} & dangerous == {"info"}


def test_the_sidecar_holds_nothing_the_service_lacks() -> None:
    assert set(SIDECAR_COMMANDS) < set(SERVICE_COMMANDS)


def test_passwords_come_from_the_environment_and_are_printed_as_their_sha256_only(cli: typer.Typer) -> None:
    code, lines, stderr = _run(cli, env=PASSWORDS)
    assert code == 0
    assert stderr == ""
    assert [line.split()[2] for line in lines] == [SERVICE.default_user, SIDECAR.default_user]
    for line, role in zip(lines, (SERVICE, SIDECAR), strict=True):
        password = PASSWORDS[role.password_env]
        assert f" on #{hashlib.sha256(password.encode()).hexdigest()} " in line
        assert password not in line


def test_a_user_without_a_password_is_printed_off_and_said_so_on_stderr_only(cli: typer.Typer) -> None:
    code, lines, stderr = _run(cli, env={SERVICE.password_env: "service-pw"})
    assert code == 0
    assert [line.split()[3:5] for line in lines] == [["reset", "on"], ["reset", "off"]]
    assert "rollout-sidecar (sidecar) is off: set ROLLOUT_ACL_SIDECAR_PASSWORD" in stderr
    assert all(line.startswith("ACL SETUSER ") for line in lines)  # redis-cli runs every stdout line


def test_the_users_names_and_the_prefix_are_the_callers(cli: typer.Typer) -> None:
    code, lines, _ = _run(cli, "--prefix", "tenant-a", "--service-user", "svc", "--sidecar-user", "car")
    assert code == 0
    assert [line.split()[2] for line in lines] == ["svc", "car"]
    assert all(" ~tenant-a:* resetchannels -@all " in line for line in lines)


@pytest.mark.parametrize(
    "args",
    [
        ("--prefix", "rs*"),  # a glob would let the users into other deployments' keys
        ("--prefix", "{rs}"),
        ("--sidecar-user", "default"),
        ("--service-user", "same", "--sidecar-user", "same"),
        ("--sidecar-user", "two words"),
    ],
)
def test_it_refuses_a_prefix_or_user_that_would_mean_something_else(
    cli: typer.Typer, args: tuple[str, ...]
) -> None:
    code, lines, _ = _run(cli, *args)
    assert code == 2
    assert lines == []


def test_an_aclfile_it_prints_is_one_a_server_loads_at_start(cli: typer.Typer, tmp_path: Path) -> None:
    aclfile = tmp_path / "users.acl"
    code, _, _ = _run(cli, "--aclfile", "--output", str(aclfile), env=PASSWORDS)
    assert code == 0
    with aclfile_server(aclfile) as port:
        sidecar = redis.Redis(
            port=port, username=SIDECAR.default_user, password=PASSWORDS[SIDECAR.password_env]
        )
        assert sidecar.set("rs:x", "1")
        with pytest.raises(redis.exceptions.NoPermissionError):
            sidecar.flushall()
        sidecar.close()


def test_a_server_started_with_its_aclfile_lets_no_one_in_as_default_without_the_password(
    cli: typer.Typer, tmp_path: Path
) -> None:
    """A server started with an aclfile ignores ``requirepass``: a file without the default user left
    it on with no password and every right, FLUSHALL open to anyone who reaches the port."""
    aclfile = tmp_path / "users.acl"
    code, _, _ = _run(cli, "--aclfile", "--output", str(aclfile), env={**PASSWORDS, ADMIN_ENV: "adm"})
    assert code == 0
    with aclfile_server(aclfile, "--requirepass", "adm") as port:
        assert anonymous_ping(port).startswith(b"-NOAUTH")
        with redis.Redis(port=port, password="adm") as admin:
            assert admin.acl_whoami() == "default"
            assert admin.flushall()
    _, lines, _ = _run(cli, "--aclfile")
    assert lines[0] == "user default reset off ~* &* +@all", "no password: no one logs in as default"


def test_the_shipped_aclfile_is_what_the_command_prints(cli: typer.Typer) -> None:
    """deploy/redis/users.acl, the placeholder users (off) for review and diffs, never drifts."""
    code, lines, _ = _run(cli, "--aclfile")
    assert code == 0
    assert SHIPPED.read_text() == "\n".join(lines) + "\n"


def test_only_a_cluster_deployment_gets_the_cluster_clients_discovery_commands(cli: typer.Typer) -> None:
    _, plain, _ = _run(cli)
    _, clustered, _ = _run(cli, "--cluster")
    assert all(" +cluster|slots " not in f"{line} " and " +command " not in f"{line} " for line in plain)
    assert all(f"{line} ".endswith(" +cluster|slots +cluster|info +command +asking ") for line in clustered)


def test_the_command_s_default_user_names_are_the_roles(cli: typer.Typer) -> None:
    """The command spells the defaults itself (the CLI root must not load redis-py through
    ``service.delivery``): they are the roles' names, and a run without ``--*-user`` prints those."""
    assert (SERVICE.default_user, SIDECAR.default_user) == (redis_acl.SERVICE_USER, redis_acl.SIDECAR_USER)
    _, lines, _ = _run(cli)
    assert [line.split()[2] for line in lines] == [SERVICE.default_user, SIDECAR.default_user]

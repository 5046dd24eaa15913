"""docs/operations.md's compose password rotation, run in its order: no login refused on the way.

The section's ``docker compose`` commands are read from its text, in order, and each is played
against valkey started from the ``redis-users`` one-shot's aclfile, as compose starts it: ``ACL
SETUSER`` and ``ACL LOAD`` on the server; ``up redis-users`` rewrites the aclfile with the new
password; ``up -d`` rewrites it too and recreates the sidecars on the new password (Redis, nothing of
its own changed, stays up). After each, every sidecar logs in afresh with the password it runs on (a
reconnect after a blip). The order this section gave before (stop49) loaded the new file while the
sidecars still ran on the old password: their reconnects were refused until ``up -d``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import redis
import typer

from service.delivery.acl import SIDECAR
from tests.deploy.aclfile_server import aclfile_server
from tests.deploy.compose_redis import compose_services, redis_flags, write_aclfile

OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
NEW = "rotated-sidecar-password"


def documented_commands() -> list[str]:
    """The ``docker compose`` commands of the rotation section's compose part, in the order given."""
    section = OPERATIONS.read_text().split("#### Rotating a Redis password", 1)[1].split("\n## ", 1)[0]
    compose = section[section.index("Compose") :]
    return [command.strip() for command in re.findall(r"docker compose [^`\n#]*", compose)]


def _logs_in(port: int, password: str) -> bool:
    with redis.Redis(port=port, username=SIDECAR.default_user, password=password) as client:
        try:
            return client.ping() is True
        except redis.AuthenticationError:
            return False


class _Rotation:
    """The loop's Redis and its sidecars' password, as the documented commands change them."""

    def __init__(self, cli: typer.Typer, services: dict[str, dict[str, Any]], port: int, where: Path) -> None:
        self.cli, self.services, self.port, self.where = cli, services, port, where
        self.running_on = str(services["redis-users"]["environment"][SIDECAR.password_env])
        self.admin = redis.Redis(port=port, password=str(services["redis"]["environment"]["REDISCLI_AUTH"]))

    def play(self, command: str) -> None:
        if "ACL SETUSER" in command:
            user = re.search(r"ACL SETUSER (\S+)", command)
            assert user is not None, command
            assert user[1] == SIDECAR.default_user, command
            self.admin.acl_setuser(user[1], enabled=True, passwords=[f"+{NEW}"])  # >NEW; the user was on
        elif "ACL LOAD" in command:
            self.admin.acl_load()
        elif command.endswith("up redis-users") or command.endswith("up -d"):
            self.services["redis-users"]["environment"][SIDECAR.password_env] = NEW  # set in .env
            write_aclfile(self.cli, self.services, self.where)
            if command.endswith("up -d"):
                self.running_on = NEW  # the sidecars recreated: their environment changed
        else:
            raise AssertionError(f"a command the test cannot play: {command}")


def test_the_documented_compose_rotation_refuses_no_sidecar_on_the_way(
    cli: typer.Typer, tmp_path: Path
) -> None:
    commands = documented_commands()
    assert any("ACL LOAD" in c for c in commands)
    assert any(c.endswith("up -d") for c in commands)
    services = compose_services()
    aclfile = write_aclfile(cli, services, tmp_path)
    with aclfile_server(aclfile, *redis_flags(services)) as port:
        rotation = _Rotation(cli, services, port, tmp_path)
        refused = []
        for command in commands:
            rotation.play(command)
            if not _logs_in(port, rotation.running_on):
                refused.append(command)
        rotation.admin.close()
        assert (refused, rotation.running_on, _logs_in(port, NEW)) == ([], NEW, True)
        old = str(compose_services()["redis-users"]["environment"][SIDECAR.password_env])
        assert not _logs_in(port, old), "the old password is gone once the rotation ends"

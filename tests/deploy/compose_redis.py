"""deploy/compose.yaml as a fresh ``up`` reads it, and its Redis started as compose starts it: the
aclfile its ``redis-users`` one-shot writes and the flags the file gives valkey-server.

The Redis users, the real compose loop and the password rotation tests each start that Redis; they
read the file through these, rather than through one test module's names (or a copy of them), so a
change to how the file is read or its one-shot run reaches all three.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import typer
import yaml
from typer.testing import CliRunner

COMPOSE = Path(__file__).resolve().parents[2] / "deploy" / "compose.yaml"


def compose_services() -> dict[str, dict[str, Any]]:
    """The compose services with ``${VAR:-default}`` resolved as a fresh ``up`` would."""
    text = re.sub(r"\$\{[A-Z_][A-Z0-9_]*:-([^}]*)\}", r"\1", COMPOSE.read_text())
    services: dict[str, dict[str, Any]] = yaml.safe_load(text)["services"]
    return services


def write_aclfile(cli: typer.Typer, services: dict[str, dict[str, Any]], where: Path) -> Path:
    """Run the ``redis-users`` one-shot as the file gives it, its output moved into ``where``."""
    one_shot = services["redis-users"]
    command = [str(arg) for arg in one_shot["command"]]
    at = command.index("--output") + 1
    command[at] = str(where / Path(command[at]).name)
    env = {name: str(value) for name, value in one_shot["environment"].items()}
    result = CliRunner().invoke(cli, command, env=env)
    assert result.exit_code == 0, result.output
    assert "is off" not in result.stderr, "every user of the loop gets a password"
    return Path(command[at])


def redis_flags(services: dict[str, dict[str, Any]]) -> list[str]:
    """Redis's flags in the file after the binary, the aclfile left to ``aclfile_server``."""
    flags = [str(arg) for arg in services["redis"]["command"][1:]]
    at = flags.index("--aclfile")
    return flags[:at] + flags[at + 2 :]

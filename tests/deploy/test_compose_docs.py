"""Every ``docker compose`` command the README and the docs pages show names the compose file.

README's "Deploy" runs compose from the repository root with ``-f deploy/compose.yaml``; without it,
compose looks for a ``compose.yaml`` in the folder it runs in (and its parents) and finds none. The
compose password rotation and the rollback of docs/operations.md showed bare ``docker compose exec``
and ``docker compose up -d`` (until round 54): typed from the root as README has the user stand, each
failed with no configuration file found. docs/experiments.md and docs/benchmarks.md are records of
commands run then, so they are not read."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = "deploy/compose.yaml"
RECORDS = {"experiments.md", "benchmarks.md"}
_COMMAND = re.compile(r"docker compose\b[^`\n#]*")


def _pages() -> list[Path]:
    return [ROOT / "README.md", *(p for p in sorted((ROOT / "docs").glob("*.md")) if p.name not in RECORDS)]


def shown_commands() -> list[tuple[str, str]]:
    """(page:line, command) for each ``docker compose ...`` the pages show, in a code block or in prose."""
    found = []
    for page in _pages():
        for number, line in enumerate(page.read_text().splitlines(), 1):
            found += [
                (f"{page.relative_to(ROOT)}:{number}", m.group().strip()) for m in _COMMAND.finditer(line)
            ]
    return found


def test_the_compose_file_the_commands_name_is_the_repository_s() -> None:
    assert (ROOT / COMPOSE_FILE).is_file()


def test_every_compose_command_a_page_shows_names_the_compose_file() -> None:
    commands = shown_commands()
    assert any(where.startswith("README.md") for where, _ in commands)
    assert any(where.startswith("docs/operations.md") for where, _ in commands)
    assert [(where, command) for where, command in commands if f"-f {COMPOSE_FILE}" not in command] == []

"""Every ``ROLLOUT_*`` variable the README and the docs pages name is one something reads: a setting of
the service, a variable a command's option reads (the sidecar's ``ROLLOUT_ENGINE_API_KEY``), or a
password ``redis-acl`` reads (``ROLLOUT_ACL_SERVICE_PASSWORD``). The service ignores a variable no
setting reads, with a warning naming the closest (``settings.unknown_variables``), so a name a doc
gets wrong (``ROLLOUT_REDIS_USER`` for ``ROLLOUT_REDIS_USERNAME``) leaves an operator who copies it on
the default; tests/service/test_doc_values.py holds the README's settings table to the settings, not
the names the prose and the examples give. docs/experiments.md is the record and keeps the names
of its day, so it is not read."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import typer

from service.delivery.acl import DEFAULT_PASSWORD_ENV, ROLES
from service.settings import SIDECAR_ONLY_VARIABLES, Settings
from tests.service.cli_docs import ROOT, doc_files

_VARIABLE = re.compile(r"\bROLLOUT_[A-Z0-9_]*[A-Z0-9]\b")
# Names a doc gives on purpose as ones nothing reads -> where and why.
NOT_READ = {
    "ROLLOUT_TRAINER_TOKEN": "README.md: the example of a misspelt setting the service warns about",
}


def named(texts: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """Each ``ROLLOUT_*`` variable in ``texts`` (where, text) -> the places that name it."""
    found: dict[str, list[str]] = {}
    for where, text in texts:
        for number, line in enumerate(text.splitlines(), start=1):
            for variable in _VARIABLE.findall(line):
                found.setdefault(variable, []).append(f"{where}:{number}")
    return found


def _docs() -> list[tuple[str, str]]:
    pages = [path for path in doc_files() if path.name != "experiments.md"]
    return [(str(path.relative_to(ROOT)), path.read_text()) for path in pages]


def _option_variables(app: typer.Typer) -> set[str]:
    """The variables the options of every command read (``envvar``: one name or several)."""
    found: set[str] = set()

    def walk(command: object) -> None:
        for param in getattr(command, "params", []):
            envvar = getattr(param, "envvar", None)
            found.update([envvar] if isinstance(envvar, str) else envvar or [])
        for sub in getattr(command, "commands", {}).values():
            walk(sub)

    walk(typer.main.get_command(app))
    return found


def read_variables(app: typer.Typer) -> set[str]:
    """Every ``ROLLOUT_*`` variable the service, the commands or ``redis-acl`` read (its users' passwords and
    the aclfile's ``default`` user's)."""
    settings = {f"ROLLOUT_{name.upper()}" for name in Settings.model_fields}
    passwords = {role.password_env for role in ROLES} | {DEFAULT_PASSWORD_ENV}
    return settings | SIDECAR_ONLY_VARIABLES | passwords | _option_variables(app)


def unread(texts: Iterable[tuple[str, str]], app: typer.Typer) -> list[str]:
    """``variable (places)`` for each variable ``texts`` name that nothing reads and ``NOT_READ`` lacks."""
    known = read_variables(app) | set(NOT_READ)
    found = sorted(named(texts).items())
    return [f"{name} ({', '.join(places)})" for name, places in found if name not in known]


def test_every_variable_the_docs_name_is_one_a_setting_or_a_command_reads(cli: typer.Typer) -> None:
    assert unread(_docs(), cli) == []


def test_a_variable_nothing_reads_is_caught_where_the_doc_names_it(cli: typer.Typer) -> None:
    text = "give each sidecar `ROLLOUT_REDIS_USER=rollout-sidecar`\nand `ROLLOUT_REDIS_USERNAME` too\n"
    assert unread([("docs/x.md", text)], cli) == ["ROLLOUT_REDIS_USER (docs/x.md:1)"]


def test_the_names_given_as_read_by_nothing_are_still_written_and_still_not_read(cli: typer.Typer) -> None:
    written = named(_docs())
    for name, why in NOT_READ.items():
        assert name in written, f"{name} is no longer in the docs: drop it from NOT_READ ({why})"
        assert name not in read_variables(cli), f"{name} is read now: drop it from NOT_READ"


def test_the_docs_read_are_the_readme_and_the_pages_but_the_record() -> None:
    read = {Path(where).name for where, _ in _docs()}
    assert {"README.md", "operations.md", "sidecar.md"} <= read
    assert "experiments.md" not in read

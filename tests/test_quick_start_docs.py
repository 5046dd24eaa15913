"""The README's two commands do what its quick start says: ``make run`` starts ``serve`` on the address
it gives, and ``make test`` runs ruff, mypy --strict and pytest, in the workers and the distribution
the paragraph below it gives, each building ``.venv`` first. Read from the Makefile, which nothing
held to the README: a changed default there (the workers, a flag on ``serve``) left the README's
figures wrong with every test passing."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from service.settings import Settings

ROOT = Path(__file__).resolve().parents[1]


def recipe(makefile: str, target: str) -> tuple[list[str], list[str]]:
    """A target's prerequisites and the commands of its recipe (tab-indented lines after it)."""
    match = re.search(rf"^{target}:([^\n]*)\n((?:\t[^\n]*\n)*)", makefile, re.MULTILINE)
    assert match is not None, f"no target {target}"
    return match.group(1).split(), [line.strip() for line in match.group(2).splitlines()]


def _quick_start() -> str:
    return (ROOT / "README.md").read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]


def test_make_run_serves_on_the_address_the_quick_start_gives() -> None:
    (comment,) = re.findall(r"^make run +# start the service on ([0-9.]+):([0-9]+) ", _quick_start(), re.M)
    defaults = Settings.model_fields
    assert comment == (defaults["host"].default, str(defaults["port"].default))
    prerequisites, commands = recipe((ROOT / "Makefile").read_text(), "run")
    assert prerequisites == ["$(STAMP)"]
    assert commands == ["$(BIN)/rollout-scheduler serve"]  # no flag: the settings' defaults hold


def test_make_test_runs_ruff_strict_mypy_and_pytest_in_the_workers_the_readme_gives() -> None:
    makefile = (ROOT / "Makefile").read_text()
    quick = " ".join(_quick_start().split())
    assert "make test # ruff, mypy --strict, pytest" in quick
    prerequisites, commands = recipe(makefile, "test")
    assert prerequisites == ["lint"]  # ruff first: a lint error stops the run before the long part
    # then mypy and pytest beside each other (mypy would leave a core idle for its minute alone)
    assert commands == ["$(MAKE) --no-print-directory -j 2 typecheck pytest"]
    for target, tool in [("lint", "ruff"), ("typecheck", "mypy"), ("pytest", "pytest")]:
        prerequisites, commands = recipe(makefile, target)
        assert prerequisites == ["$(STAMP)"]  # each builds .venv on first use
        assert commands
        assert all(command.startswith(f"$(BIN)/{tool} ") for command in commands)
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["strict"] is True
    (workers,) = re.findall(
        r"`make test` runs pytest in ([0-9]+) parallel workers \(pytest-xdist, `--dist (\w+)`", quick
    )
    (default,) = re.findall(r"^PYTEST_WORKERS \?= ([0-9]+)$", makefile, re.MULTILINE)
    assert recipe(makefile, "pytest")[1] == [f"$(BIN)/pytest -n $(PYTEST_WORKERS) --dist {workers[1]}"]
    assert workers[0] == default
    assert "`make test PYTEST_WORKERS=0` for one process" in quick


# Top-level folders no Python of the project lives in: hidden ones and what .gitignore keeps out.
UNCHECKED = {"build", "dist", "var"}


def test_make_test_type_checks_every_top_level_folder_that_holds_python() -> None:
    """Issue 2 puts mypy inside ``make test``: its ``typecheck`` names folders, and ``deploy/`` (the
    image's health check, the constraints' pinning script) arrived after the list was written and was
    never added, so a type error there passed ``make test``."""
    (command,) = recipe((ROOT / "Makefile").read_text(), "typecheck")[1]
    checked = set(command.split()[1:])
    holding = {
        folder.name
        for folder in ROOT.iterdir()
        if folder.is_dir()
        and not folder.name.startswith(".")
        and folder.name not in UNCHECKED
        and not folder.name.endswith(".egg-info")
        and any(folder.rglob("*.py"))
    }
    assert "deploy" in holding
    assert holding <= checked, f"make typecheck leaves out {sorted(holding - checked)}"


def test_ci_runs_make_test_from_the_repository_root_and_stops_on_the_first_failure() -> None:
    """Issue 2's ``.ci/run`` calls ``make test``: nothing read the script, so a CI that ran something
    else, or from another folder, or went on past a failure, passed every test."""
    script = ROOT / ".ci" / "run"
    assert script.stat().st_mode & 0o111, ".ci/run must be executable"
    lines = [line.strip() for line in script.read_text().splitlines()]
    assert lines[0] == "#!/usr/bin/env bash"
    commands = [line for line in lines[1:] if line and not line.startswith("#")]
    assert commands == ["set -euo pipefail", 'cd "$(dirname "$0")/.."', "make test"]

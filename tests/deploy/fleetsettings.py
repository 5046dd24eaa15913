"""The service's settings as a deploy file gives them: which ones it decides, which it leaves out and says
why, and whether the values are ``serve``'s own.

Shared by the compose and the Kubernetes tests. A setting added to ``Settings`` later fails both until
each file sets it or says why it does not, so no deployment runs on a default nobody looked at, and
a default changed in the code is not silently held at the old value by a file that claims it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import pytest

from service.settings import Settings, variable_name
from tests.deploy.cliargs import parse_cli

# Where a deploy file gives a setting other than the code's default on purpose, and why; every other
# setting it gives is the default, so that the file reads as the defaults an operator may change.
DEPARTURES = {
    "ROLLOUT_MODEL_DIR": "the image's store (deploy/Dockerfile), on a volume; var/models is a checkout's",
    "ROLLOUT_REDIS_USERNAME": 'each process\'s own ACL user (docs/operations.md, "Redis users (ACL)")',
}
# How a deploy file says why it leaves a setting out: a comment line ``# not set: VARIABLE, ...: why``.
NOT_SET = re.compile(r"#\s*not set: (.*)$", re.MULTILINE)
VARIABLE = re.compile(r"\b(?:ROLLOUT_[A-Z0-9_]+|REDIS_URL)\b")


def setting_variables() -> dict[str, str]:
    """Each setting's variable by field, the one the README lists (``REDIS_URL`` for the URL)."""
    return {field: variable_name(field, {}) for field in Settings.model_fields}


def secret_variables() -> set[str]:
    """The settings a file takes from a secret, not a literal: their values are not the default."""
    fields = Settings.model_fields.items()
    return {variable_name(name, {}) for name, field in fields if "SecretStr" in str(field.annotation)}


def flag_variables(args: Sequence[str]) -> set[str]:
    """The variables of the settings ``serve``'s command line ``args`` sets by flag."""
    given = parse_cli(args).params.items()
    return {setting_variables()[field] for field, value in given if value is not None}


def explained(text: str) -> set[str]:
    """The variables a deploy file's ``# not set:`` comments list before their reason (the first
    ``": "``): one their reason mentions is not explained by it."""
    listed = (line.partition(": ")[0] for line in NOT_SET.findall(text))
    return {name for names in listed for name in VARIABLE.findall(names)}


def undecided(variables: Iterable[str], args: Sequence[str], text: str) -> list[str]:
    """The settings a deploy file (``text``) neither gives ``serve`` (its ``variables`` and command line
    ``args``) nor explains."""
    given = set(variables) | flag_variables(args) | explained(text)
    return sorted(set(setting_variables().values()) - given)


def not_the_default(env: Mapping[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The literal settings of ``env`` whose value, read as ``serve`` reads it, is not the code's
    default, and is not a departure listed in ``DEPARTURES``."""
    fields = {variable: field for field, variable in setting_variables().items()}
    skipped = secret_variables() | {"REDIS_URL"} | set(DEPARTURES)
    clear_settings(monkeypatch)
    found = {}
    for variable, value in env.items():
        field = fields.get(variable)
        if field is None or variable in skipped:
            continue
        read = getattr(Settings.model_validate({field: value}), field)
        if read != Settings.model_fields[field].default:
            found[variable] = value
    return found


def clear_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset every setting variable of the test's own environment, so that only the file's count."""
    for name in os.environ:
        if name.startswith("ROLLOUT_") or name == "REDIS_URL":
            monkeypatch.delenv(name)


def serve_settings(
    env: Mapping[str, str], args: Sequence[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Settings:
    """What ``serve`` builds from ``env`` and its command line ``args`` (flags left unset are not
    passed); only the model store moves to ``tmp_path``, the container's path not being ours."""
    clear_settings(monkeypatch)
    for name, value in {**env, "ROLLOUT_MODEL_DIR": str(tmp_path / "models")}.items():
        monkeypatch.setenv(name, value)
    return Settings(**{k: v for k, v in parse_cli(args).params.items() if v is not None})

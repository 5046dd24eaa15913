"""``serve``'s warning about ``ROLLOUT_*`` variables no setting reads knows ``redis-acl``'s inputs.

deploy/compose exports ``ROLLOUT_ACL_*_PASSWORD`` for its ``redis-users`` one-shot; an operator who ran
``redis-acl`` from the same shell as ``serve`` was told each "is not a setting and is ignored", as
if it were a typo of one (stop49)."""

from __future__ import annotations

from pathlib import Path

import yaml

from service.delivery.acl import DEFAULT_PASSWORD_ENV, ROLES
from service.settings import unknown_variables

COMPOSE = Path(__file__).resolve().parents[3] / "deploy" / "compose.yaml"


def test_the_redis_acl_commands_passwords_are_no_unknown_variable() -> None:
    inputs = {role.password_env: "pw" for role in ROLES} | {DEFAULT_PASSWORD_ENV: "admin-pw"}
    assert len(inputs) == 3
    assert unknown_variables(inputs) == []


def test_the_environment_composes_one_shot_exports_warns_of_nothing_at_serve() -> None:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    exported = {str(name): str(value) for name, value in services["redis-users"]["environment"].items()}
    assert {role.password_env for role in ROLES} <= exported.keys()
    assert unknown_variables(exported) == []


def test_a_misspelt_acl_password_is_still_named_with_the_variable_it_resembles() -> None:
    hint = "did you mean ROLLOUT_ACL_SIDECAR_PASSWORD?"
    assert unknown_variables({"ROLLOUT_ACL_SIDECAR_PASSWD": "pw"}) == [
        f"ROLLOUT_ACL_SIDECAR_PASSWD is not a setting and is ignored; {hint}"
    ]

"""``rollout-scheduler serve`` refusing a setting at start: one line, naming the setting as the user set it
(flag or variable), the value given (never a secret's) and the rule broken, in the project's own words."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from pydantic import SecretStr, ValidationError
from typer.testing import CliRunner, Result

from service.commands.serve import port_taken
from service.settings import Settings, invalid_setting

PREFIX_RULE = "must be 1-64 of A-Z a-z 0-9 _ . : -"  # the key-prefix rule, as serve states it


def _refused_at_start(
    cli: typer.Typer,
    monkeypatch: pytest.MonkeyPatch,
    environment: dict[str, str],
    flags: tuple[str, ...] = (),
) -> Result:
    """``serve`` run with ``environment`` and ``flags``, which hold a setting it refuses: it exits 2."""
    for variable, value in environment.items():
        monkeypatch.setenv(variable, value)
    result = CliRunner().invoke(cli, ["serve", *flags])
    assert result.exit_code == 2
    return result


@pytest.mark.parametrize(
    ("variable", "value", "line"),
    [
        (
            "ROLLOUT_DEFAULT_QUANTILE",
            "nan",
            "invalid setting ROLLOUT_DEFAULT_QUANTILE='nan': Input should be less",
        ),
        ("ROLLOUT_PORT", "99999", "invalid setting ROLLOUT_PORT='99999': Input should be less than or equal"),
        ("ROLLOUT_LOG_LEVEL", "LOUD", "invalid setting ROLLOUT_LOG_LEVEL='LOUD': must be one of"),
        # the rule's words come from the sidecars' --prefix check, which names the value itself: the
        # line read "key_prefix='rs*': key prefix 'rs*' must be ...", the value twice
        *(
            ("ROLLOUT_KEY_PREFIX", prefix, f"invalid setting ROLLOUT_KEY_PREFIX={prefix!r}: {PREFIX_RULE}")
            for prefix in ("rs*", "a{b}", "two words")
        ),
    ],
)
def test_a_refused_setting_names_the_value_given(
    cli: typer.Typer, monkeypatch: pytest.MonkeyPatch, variable: str, value: str, line: str
) -> None:
    """pydantic's message names the setting and the rule, not what broke it ('nan', a typo's digits)."""
    stderr = _refused_at_start(cli, monkeypatch, {variable: value}).stderr
    assert stderr.startswith(f"serve: {line}"), stderr
    assert len(stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("environment", "line"),
    [
        (
            {"ROLLOUT_LOG_LEVEL": "LOUD"},
            "invalid setting ROLLOUT_LOG_LEVEL='LOUD': must be one of DEBUG, INFO, WARNING",
        ),
        (
            {"ROLLOUT_TRAINER_TOKENS": "same", "ROLLOUT_WORKER_TOKENS": "same"},
            "invalid settings: a token is in both ROLLOUT_TRAINER_TOKENS and ROLLOUT_WORKER_TOKENS",
        ),
    ],
)
def test_a_validator_s_refusal_reads_as_the_project_s_own_line(
    cli: typer.Typer, monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], line: str
) -> None:
    """pydantic put "Value error, " before each of the project's own checks' words."""
    stderr = _refused_at_start(cli, monkeypatch, environment).stderr
    assert stderr.startswith(f"serve: {line}"), stderr
    assert "Value error" not in stderr


@pytest.mark.parametrize(
    ("environment", "variable"),
    [
        ({"REDIS_URL": ""}, "REDIS_URL"),
        ({"ROLLOUT_REDIS_URL": ""}, "ROLLOUT_REDIS_URL"),
        ({"REDIS_URL": "", "ROLLOUT_REDIS_URL": "redis://127.0.0.1:1/0"}, "REDIS_URL"),  # REDIS_URL wins, set
    ],
)
def test_an_empty_redis_url_is_refused_naming_it_not_read_as_unset(
    cli: typer.Typer, monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], variable: str
) -> None:
    """It was refused as "expected redis://, ... (an http URL or a bare host is not one)", a rule
    about URLs nothing was given to break; unset, serve starts an embedded server instead."""
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.delenv("ROLLOUT_REDIS_URL", raising=False)
    stderr = _refused_at_start(cli, monkeypatch, environment).stderr
    assert stderr.startswith(f"serve: invalid setting {variable}='': set but empty; expected"), stderr
    assert len(stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("where", "reason"),
    [("{file}", "exists and is not a folder"), ("{file}/models", "cannot be created here")],
)
def test_a_model_dir_that_cannot_hold_a_store_is_named_once_with_why(
    tmp_path: Path, where: str, reason: str
) -> None:
    """The reason repeated the path the line already shows ("model_dir='/x': /x exists and is not a
    folder"), and a store under a file passed wherever the file was writable (as root, always)."""
    file = tmp_path / "afile"
    file.write_text("")
    value = where.format(file=file)
    with pytest.raises(ValidationError) as refused:
        Settings(redis_url=None, model_dir=value)
    assert (
        invalid_setting(refused.value, environ={}) == f"invalid setting ROLLOUT_MODEL_DIR={value!r}: {reason}"
    )


@pytest.mark.parametrize(
    ("environment", "flags", "line"),
    [
        (
            {"ROLLOUT_DEFAULT_POLICY": "bogus"},
            (),
            "invalid setting ROLLOUT_DEFAULT_POLICY='bogus': unknown policy",
        ),
        ({}, ("--default-policy", "bogus"), "invalid setting --default-policy='bogus': unknown policy"),
        (
            {"ROLLOUT_DEFAULT_ENGINE": "vllm-v0"},
            ("--default-engine", "vllm-v2"),
            "invalid setting --default-engine='vllm-v2': engine 'vllm-v2' unknown",
        ),
        # the flag's value is the one refused, over a variable that serve would have taken
        ({"ROLLOUT_PORT": "8001"}, ("--port", "99999"), "invalid setting --port=99999: Input should be less"),
        # the variable the environment holds, not the setting's usual name: both are read
        ({"rollout_port": "99999"}, (), "invalid setting rollout_port='99999': Input should be less"),
        ({}, ("--redis-url", "http://h:6379/0"), "invalid setting --redis-url='http://h:6379/0': "),
        # refused for what it would expose: the line named the address (0.0.0.0), not the setting
        ({}, ("--host", "0.0.0.0"), "refusing to listen on --host='0.0.0.0' without a token: set"),
        (
            {"ROLLOUT_HOST": "0.0.0.0"},
            (),
            "refusing to listen on ROLLOUT_HOST='0.0.0.0' without a token: set",
        ),
    ],
)
def test_a_refused_setting_is_named_as_the_user_set_it(
    cli: typer.Typer,
    monkeypatch: pytest.MonkeyPatch,
    environment: dict[str, str],
    flags: tuple[str, ...],
    line: str,
) -> None:
    """The line named pydantic's field (default_policy=, port=), which the user typed nowhere: they
    set ROLLOUT_DEFAULT_POLICY or --default-policy, and only REDIS_URL was named by its variable."""
    stderr = _refused_at_start(cli, monkeypatch, environment, flags).stderr
    assert stderr.startswith(f"serve: {line}"), stderr


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        ({}, "invalid settings: a token is in both ROLLOUT_TRAINER_TOKENS and ROLLOUT_WORKER_TOKENS"),
        (
            {"trainer_tokens": "--trainer-tokens"},
            "invalid settings: a token is in both --trainer-tokens and ROLLOUT_WORKER_TOKENS",
        ),
    ],
)
def test_a_check_across_settings_names_each_as_it_was_set(flags: dict[str, str], line: str) -> None:
    """Its words named both settings by their variables whatever set them; serve has no token flag
    (yet), so the flag here is one a caller of invalid_setting says it passed as a keyword."""
    with pytest.raises(ValidationError) as refused:
        Settings(redis_url=None, trainer_tokens=SecretStr("same"), worker_tokens=SecretStr("same"))
    assert invalid_setting(refused.value, flags, environ={}) == line


@pytest.mark.parametrize(
    ("environment", "secret"),
    [
        ({"ROLLOUT_TRAINER_TOKENS": "good,s3cr\u00e9t"}, "s3cr\u00e9t"),
        ({"ROLLOUT_WORKER_TOKENS": "s3cr\u00e9t"}, "s3cr\u00e9t"),
        ({"ROLLOUT_TRAINER_TOKENS": "s3cret", "ROLLOUT_WORKER_TOKENS": "s3cret"}, "s3cret"),
        ({"REDIS_URL": "redis://u:s3cret@h:99999/0"}, "s3cret"),
        ({"REDIS_URL": "http://u:s3cret@h:6379/0"}, "s3cret"),
        ({"REDIS_URL": "u:s3cret@h:6379"}, "s3cret"),  # no scheme: the credentials were shown as one
        ({"REDIS_URL": "redis://h:6379/x?password=s3cret"}, "s3cret"),
    ],
)
def test_a_refused_secret_setting_never_shows_its_value(
    cli: typer.Typer, monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], secret: str
) -> None:
    result = _refused_at_start(cli, monkeypatch, environment)
    assert result.stderr.startswith("serve: invalid setting"), result.stderr
    assert secret not in result.output


def test_a_cluster_asked_for_by_its_variable_is_named_by_it(
    cli: typer.Typer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The line named --redis-cluster, a flag the user had not given."""
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.delenv("ROLLOUT_REDIS_URL", raising=False)
    stderr = _refused_at_start(cli, monkeypatch, {"ROLLOUT_REDIS_CLUSTER": "true"}).stderr
    assert stderr.startswith("serve: ROLLOUT_REDIS_CLUSTER needs --redis-url (or REDIS_URL)"), stderr


@pytest.fixture
def taken_port(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """A loopback port that something listens on while the test runs (serve's host left loopback)."""
    for variable in ("ROLLOUT_HOST", "ROLLOUT_PORT"):
        monkeypatch.delenv(variable, raising=False)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


@pytest.mark.parametrize("by_flag", [True, False], ids=["flag", "variable"])
def test_a_port_in_use_is_named_as_set(
    cli: typer.Typer, monkeypatch: pytest.MonkeyPatch, taken_port: int, by_flag: bool
) -> None:
    """The line named the address only (127.0.0.1:8001 is already in use), not where the port came from."""
    flags = ("--port", str(taken_port)) if by_flag else ()
    environment = {} if by_flag else {"ROLLOUT_PORT": str(taken_port)}
    stderr = _refused_at_start(cli, monkeypatch, environment, flags).stderr
    named = f"--port={taken_port}" if by_flag else f"ROLLOUT_PORT='{taken_port}'"
    assert stderr.strip() == f"serve: 127.0.0.1:{taken_port} is already in use ({named})"


def test_a_port_in_use_that_nothing_set_says_what_would_set_another(taken_port: int) -> None:
    line = port_taken(Settings(redis_url=None, port=taken_port))
    assert line == f"127.0.0.1:{taken_port} is already in use (choose another with --port or ROLLOUT_PORT)"

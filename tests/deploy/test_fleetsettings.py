"""The deploy tests' settings helpers read the file alone: a setting in the environment the tests run
in (a developer's shell, CI's) is not taken for the file's, and nothing else of that environment is
touched."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.deploy.fleetsettings import not_the_default, serve_settings


def test_a_setting_of_the_tests_own_environment_is_not_read_as_the_files(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ROLLOUT_MAX_CONCURRENT_PLANS", "7")
    monkeypatch.setenv("ROLLOUT_TEST_UNRELATED", "x")  # not a setting: cleared all the same
    settings = serve_settings({}, ["serve"], monkeypatch, tmp_path)
    assert settings.max_concurrent_plans == 2  # the default, not the shell's 7
    assert "ROLLOUT_TEST_UNRELATED" not in os.environ
    assert "PATH" in os.environ  # the rest of the environment is left as it was


def test_only_a_value_that_is_not_the_default_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"ROLLOUT_LOG_LEVEL": "INFO", "ROLLOUT_MAX_CONCURRENT_PLANS": "7", "NOT_A_SETTING": "1"}
    assert not_the_default(env, monkeypatch) == {"ROLLOUT_MAX_CONCURRENT_PLANS": "7"}

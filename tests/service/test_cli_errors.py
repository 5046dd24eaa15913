"""A malformed command line gets one line on stderr and exit status 2, like the commands' own checks."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (("serve", "--port", "abc"), "rollout-scheduler serve: Invalid value for '--port'"),
        (("serve", "--no-such-flag"), "rollout-scheduler serve: No such option: --no-such-flag"),
        (("replay",), "rollout-scheduler replay: Missing argument 'trace'"),
        (("no-such-command",), "rollout-scheduler: No such command 'no-such-command'"),
    ],
)
def test_a_parse_error_is_one_line_naming_the_command_and_the_flag(args: tuple[str, ...], names: str) -> None:
    done = _run(*args)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [done.stderr.strip()], done.stderr
    assert done.stderr.startswith(names)
    assert "Traceback" not in done.stderr


def test_no_arguments_still_show_the_help_and_help_exits_zero() -> None:
    bare = _run()
    assert bare.returncode == 2
    assert "Commands" in bare.stdout
    assert _run("--help").returncode == 0


def test_a_command_s_own_exit_status_passes_through() -> None:
    done = _run(
        "trace",
        "synth",
        "--profile",
        "nope",
        "--prompts",
        "1",
        "--samples",
        "1",
        "--steps",
        "1",
        "--out",
        "t.csv",
    )
    assert done.returncode == 2
    assert done.stderr.startswith("trace: profile=")

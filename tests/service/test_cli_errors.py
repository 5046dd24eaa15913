"""A malformed command line gets one line on stderr and exit status 2, like the commands' own checks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
        # every command that reads a trace names its argument alike (push said 'TRACE' until 2026-12-07)
        (
            ("trace", "push", "--url", "http://127.0.0.1:9"),
            "rollout-scheduler trace push: Missing argument 'trace'",
        ),
        (("predictor", "eval"), "rollout-scheduler predictor eval: Missing argument 'trace'"),
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


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (("trace", "synth", "--prompts", "1", "--samples", "1", "--steps", "1", "--out", "{file}/t.csv"),
         "trace: out='{file}/t.csv': cannot be written here"),
        (("trace", "import", "--from", "csv", "{file}", "--out", "{file}/t.csv"),
         "trace: out='{file}/t.csv': cannot be written here"),
        (("predictor", "train", "{file}", "--out", "{file}"),
         "predictor train: out='{file}': exists and is not a folder"),
        (("predictor", "train", "{file}", "--out", "{file}/models"),
         "predictor train: out='{file}/models': cannot be created here"),
    ],
)  # fmt: skip
def test_an_output_path_under_a_file_names_the_flag_and_writes_nothing(
    tmp_path: Path, args: tuple[str, ...], names: str
) -> None:
    """The OS's "[Errno 17] File exists: 'x'" named neither --out nor the path, and came after the work."""
    file = tmp_path / "t.csv"
    file.write_text("step,prompt_id,sample_idx,prompt_tokens,output_tokens\n0,a,0,3,4\n1,a,0,3,5\n")
    done = _run(*(a.format(file=file) for a in args))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [names.format(file=file)], done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv"]

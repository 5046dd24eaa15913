"""The command line run again in one process (the tests' console script in-process) attaches each
command once: ``run`` attached every command group again at each call, and Typer builds every copy
at every run, so the n-th in-process run of a test worker cost n times the first (~40 ms of CPU a
copy on the 2-core dev host)."""

from __future__ import annotations

import sys

import pytest

from service import cli_app


def _names() -> list[str]:
    """Every group and command attached to the root app and to ``bench``, by name."""
    return [
        *(f"group {g.name}" for g in cli_app.app.registered_groups),
        *(f"command {c.name}" for c in cli_app.app.registered_commands),
        *(f"bench {c.name}" for c in cli_app.bench_app.registered_commands),
    ]


def test_the_command_line_run_three_times_in_one_process_attaches_each_command_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["rollout-scheduler", "--help"])
    for _ in range(3):
        with pytest.raises(SystemExit) as exited:
            cli_app.run()
        assert exited.value.code == 0
    names = _names()
    assert len(names) == len(set(names)), sorted(names)
    assert {"command sidecar", "command serve", "group trace", "bench delivery"} <= set(names)
    assert "sidecar" in capsys.readouterr().out  # each run still lists the commands

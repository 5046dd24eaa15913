"""Running the ``replay`` and ``trace`` commands in-process, as the CLI test modules do."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

FAST = ["--time-budget", "0.2"]
# Output checks play the policies in this process: a spawned pool re-imports the scheduler in each of
# its workers (~4 s a replay on 2 cores) and changes no number (test_replay.py's
# test_policies_played_in_worker_processes_give_what_they_give_in_turn). The CLI's default pool is
# still run by test_cli.py's test_replay_json_reports_the_bound_and_each_policy, and by test_interrupt.py.
IN_PROCESS = ["--processes", "1"]


def run(cli: typer.Typer, args: list[str]) -> tuple[int, str, str]:
    """The exit code, stdout and stderr of ``cli`` run with ``args``."""
    result = CliRunner().invoke(cli, args)
    return result.exit_code, result.stdout, result.stderr

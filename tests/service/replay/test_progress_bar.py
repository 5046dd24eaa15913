"""The replay's progress bar goes to the terminal on stderr, whatever stdout is.

A long replay (minutes on the headline) is often run as ``replay ... > table.txt`` or ``| tee``:
the bar must still show on the terminal and must never land in the table's file.
"""

from __future__ import annotations

import io

import pytest

from predictors.tracetable import Trace
from service.commands.replay import _run
from service.replay.harness import ReplayConfig
from service.workerspec import parse_workers


class _Terminal(io.StringIO):
    """A stream that says it is a terminal, as an interactive stderr does."""

    def isatty(self) -> bool:
        return True


def test_the_progress_bar_is_drawn_on_a_terminal_stderr_while_stdout_is_redirected(
    small_trace: Trace, monkeypatch: pytest.MonkeyPatch
) -> None:
    stderr, stdout = _Terminal(), io.StringIO()
    monkeypatch.setenv("TERM", "xterm")  # not a dumb terminal, where rich draws no live display
    monkeypatch.setattr("sys.stderr", stderr)
    monkeypatch.setattr("sys.stdout", stdout)
    config = ReplayConfig(parse_workers("2xH100", "7b"), ("lpt",), (1,), time_budget_s=0.2)
    _run(small_trace, config, quiet=False)
    assert "step 1:" in stderr.getvalue()
    assert stdout.getvalue() == ""

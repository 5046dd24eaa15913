"""A sidecar that crashed before its run prints the counters line too, all zero, with the crash as its
``error``, then its traceback (exit 1): the line every other failed exit prints.

A fleet's logs are grepped for the counters lines, then ``error`` for the failures (docs/sidecar.md):
a run that raised prints it with what it had counted (round 47, helper review47c), and a stop before
the run prints it all zero. A crash before the run (the logging's set-up, the run's imports in a broken
install, a bug in the start) printed its traceback alone, the one failure that grep missed (finish56
left it so). A refused flag is still one line on stderr and no counters line: a usage error, told as
the command line's tools tell one. Run in-process, as a caller's own program runs the command; the
console script's process, its crash's report signalled, is ``test_sidecar_crash_before_run.py``.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from service import logs
from service.commands import sidecar_checks
from service.sidecar.session_settings import SessionStats
from tests.service.sidecar.command_run import ARGS, caller_app

ZERO = {"worker_id": "w", **dict.fromkeys(SessionStats.__dataclass_fields__, 0)}


def _planted(*args: object, **kwargs: object) -> None:
    raise RuntimeError("planted crash")


def test_a_crash_setting_up_the_logging_prints_a_zero_counters_line_with_its_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(logs, "configure", _planted)
    result = CliRunner().invoke(caller_app(), ARGS)
    assert result.exit_code == 1
    assert isinstance(result.exception, RuntimeError)  # not caught: the console script prints its traceback
    (line,) = result.stdout.splitlines()
    assert json.loads(line) == {**ZERO, "error": "RuntimeError: planted crash"}
    assert list(json.loads(line))[-1] == "error"


def test_a_bug_in_the_start_s_checks_prints_it_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sidecar_checks, "check_worker_id", _planted)
    result = CliRunner().invoke(caller_app(), ARGS)
    assert result.exit_code == 1
    (line,) = result.stdout.splitlines()
    assert json.loads(line) == {**ZERO, "error": "RuntimeError: planted crash"}


def test_a_refused_flag_is_still_one_line_on_stderr_and_no_counters_line() -> None:
    result = CliRunner().invoke(caller_app(), [*ARGS, "--max-num-seqs", "0"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith("sidecar: ")

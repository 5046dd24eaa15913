"""A sidecar's crash before its run: the counters line's ``error`` is the exception's own line, and a
crash that leaves no counters to print still exits 1 with its own traceback.

The counters line's ``error`` is the last line of the crash's report, the one an operator greps for:
an exception whose report spans lines (a ``SyntaxError`` in a module of a broken install shows its
file, its code and a caret first) still gives ``SyntaxError: ...``, not its file's line. And where
even the sidecar's own modules do not import (a broken install), there are no counters to print:
the command exits 1 with that ``ImportError`` uncaught, for its traceback, and prints no line rather
than failing again in the handler (a second exception over the first). Run in-process, as
``test_crash_before_run_counters.py``.
"""

from __future__ import annotations

import json
import sys

import pytest
from typer.testing import CliRunner

from service import logs
from service.sidecar.session_settings import SessionStats
from tests.service.sidecar.command_run import ARGS, caller_app

ZERO = {"worker_id": "w", **dict.fromkeys(SessionStats.__dataclass_fields__, 0)}


def _syntax_error(*args: object, **kwargs: object) -> None:
    raise SyntaxError("invalid syntax", ("broken.py", 3, 5, "x = (\n", 3, 6))


def test_a_crash_whose_report_spans_lines_gives_its_last_line_as_the_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(logs, "configure", _syntax_error)
    result = CliRunner().invoke(caller_app(), ARGS)
    assert result.exit_code == 1
    assert isinstance(result.exception, SyntaxError)
    (line,) = result.stdout.splitlines()
    assert json.loads(line) == {**ZERO, "error": "SyntaxError: invalid syntax"}


def test_a_run_module_that_does_not_import_exits_1_with_its_import_error_and_no_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "service.sidecar.launch", None)  # import of it fails
    result = CliRunner().invoke(caller_app(), ARGS)
    assert result.exit_code == 1
    assert isinstance(result.exception, ImportError)
    assert result.exception.__context__ is None  # raised once, not again from its handler
    assert result.stdout == ""

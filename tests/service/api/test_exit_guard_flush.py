"""The exit guard ends the process even where the log cannot be flushed: a stderr whose reader is
gone (``serve 2>&1 | jq`` stopped by the same Ctrl-C) raises ``BrokenPipeError`` from the handler's
flush, which the guard called bare, so its thread died before its ``os._exit`` and the exit it is
there to bound hung until a SIGKILL (review50c). Its sleep and ``os._exit`` are stood in for."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from service.api import exit_guard


class _Broken(logging.Handler):
    """A handler whose stream's reader is gone: every flush raises."""

    def emit(self, record: logging.LogRecord) -> None:
        pass

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_log_that_cannot_be_flushed_does_not_keep_the_guard_from_ending_the_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ended: list[int] = []
    monkeypatch.setattr(exit_guard, "time", SimpleNamespace(sleep=lambda _: None))
    monkeypatch.setattr(exit_guard, "os", SimpleNamespace(_exit=ended.append))
    monkeypatch.setattr(exit_guard, "_last_acts", ())
    broken = _Broken()
    logging.getLogger().addHandler(broken)
    try:
        exit_guard._end_after(5.0)
    finally:
        logging.getLogger().removeHandler(broken)
        exit_guard._fired.clear()
    assert ended == [exit_guard.FORCED_STATUS]

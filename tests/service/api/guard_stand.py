"""The exit guard with its sleep, its ``os._exit`` and its ignoring of the stop signals stood in for (the
guard itself ends the process; ignored, SIGINT and SIGTERM would stay so in the test's process): what the
arm and last-act tests share."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from service.api import exit_guard


class Stand:
    """The guard's ``time.sleep``, ``time.monotonic``, ``os._exit`` and ``_keep_the_status``: what it
    slept, the clock a test moves (``now``), the status it ended with, and how often it kept one."""

    def __init__(self) -> None:
        self.slept: list[float] = []
        self.status: list[int] = []
        self.now = 0.0
        self.kept = 0

    def keep(self) -> None:
        self.kept += 1

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)

    def exit(self, status: int) -> None:
        self.status.append(status)  # and returns: the guard's thread then ends


def stood_guard(monkeypatch: pytest.MonkeyPatch) -> Stand:
    """An enabled guard, not armed nor fired, whose sleep returns at once and whose end is recorded."""
    stood = Stand()
    monkeypatch.setattr(exit_guard, "time", SimpleNamespace(sleep=stood.sleep, monotonic=stood.monotonic))
    monkeypatch.setattr(exit_guard, "os", SimpleNamespace(_exit=stood.exit))
    monkeypatch.setattr(exit_guard, "_keep_the_status", stood.keep)
    monkeypatch.setattr(exit_guard, "_enabled", True)
    monkeypatch.setattr(exit_guard, "_armed", None)
    monkeypatch.setattr(exit_guard, "_fired", threading.Event())
    monkeypatch.setattr(exit_guard, "_exited", False)
    monkeypatch.setattr(exit_guard, "_deadline", None)
    return stood

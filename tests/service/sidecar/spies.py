"""Spies on a real session: what it was asked to do, recorded as it does it. The drain and shutdown
tests read from them the bound each hand-back was given, which no counter or log line says."""

from __future__ import annotations

from typing import Any

import pytest

from service.sidecar.session import WorkerSession


def hand_back_bounds(session: WorkerSession, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The ``within_s`` of each of ``session``'s hand-backs from now on, in order; each still runs."""
    given: list[float] = []
    hand_back = session.hand_back

    async def recorded(helds: list[Any], within_s: float, died: str = "", hurry: Any = None) -> None:
        given.append(within_s)
        await hand_back(helds, within_s, died, hurry)

    monkeypatch.setattr(session, "hand_back", recorded)
    return given

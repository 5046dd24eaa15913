"""The stop tells an automatic retrain's thread by where it is: one not yet at its retrain still runs,
one past its last line has ended, and a retrain refused beside it leaves it as it was.

Why. ``Retrainer.stop`` decides, under the lock the retrain's lines are said under, whether a retrain
still runs (``_under_way``): one holds the retrain's lock, or is past its fence storing its version,
or is the automatic one's thread that has not said its last line (``_end``). Each of those is a
thread's own: a retrain refused because another runs ends too, and had it cleared what the running
one set, the stop took a retrain storing its version for one that stores none, gave the retrain lock
back under its store (``release_at_stop``), and its last fence took the complete version back. Real
Redis, real LightGBM, the real store; the retrainer's steps are wrapped only to hold a thread where
the stop is to find it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from predictors.store import ModelStore
from service.app import create_app
from service.context import Context
from service.problems.table import ConflictError
from service.settings import Settings
from tests.service.api_helpers import actual_history, with_settings

EVERY = 2  # steps between automatic retrains
WAIT_S = 60.0  # a bound on the test's own waits


def _started(client: TestClient) -> Any:
    """The app's retrainer, with the history to fit on posted."""
    assert client.post("/actuals", json={"actuals": actual_history(steps=3)}).status_code == 200
    ctx: Context = client.app.state.context  # type: ignore[attr-defined]
    return ctx.retrainer


def _automatic(retrainer: Any) -> threading.Thread:
    """The automatic retrain a step boundary starts (the first step seen only sets the mark)."""
    assert retrainer.after_step(0) is False
    assert retrainer.after_step(EVERY) is True
    thread: threading.Thread = retrainer.background
    return thread


def _held_at(hold: threading.Event, go: threading.Event, step: Callable[..., Any]) -> Callable[..., Any]:
    """``step`` as it is, but the thread that runs it says ``hold`` and waits for ``go`` first."""

    def held(*args: Any, **kwargs: Any) -> Any:
        hold.set()
        assert go.wait(WAIT_S)
        return step(*args, **kwargs)

    return held


def _abandoned(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("retrain abandoned")]


def test_a_retrain_asked_for_while_the_automatic_one_stores_is_refused_and_leaves_its_version_stored(
    live_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = with_settings(live_settings, retrain_every_steps=EVERY)
    storing, go = threading.Event(), threading.Event()
    with TestClient(create_app(settings)) as client:
        retrainer = _started(client)
        monkeypatch.setattr(ModelStore, "save", _held_at(storing, go, ModelStore.save))  # past its fence
        automatic = _automatic(retrainer)
        assert storing.wait(WAIT_S)
        with pytest.raises(ConflictError):
            retrainer.retrain_now("request")  # refused: this replica retrains already
        retrainer.halt()  # then the stop begins, as ``Startup.halt`` does
        retrainer.release_at_stop()
        go.set()
        automatic.join(WAIT_S)
        assert not automatic.is_alive()
        assert len(ModelStore(settings.model_dir).versions()) == 1  # stored whole, not taken back


def test_a_stop_after_the_automatic_retrains_last_line_abandons_nothing(
    live_settings: Settings, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    ended, go = threading.Event(), threading.Event()
    with TestClient(create_app(with_settings(live_settings, retrain_every_steps=EVERY))) as client:
        retrainer = _started(client)
        end = retrainer._end

        def ending() -> None:  # its last line said, its thread not yet gone
            end()
            ended.set()
            assert go.wait(WAIT_S)

        monkeypatch.setattr(retrainer, "_end", ending)
        automatic = _automatic(retrainer)
        assert ended.wait(WAIT_S)
        idle = retrainer.stop(0.0)
        go.set()
        automatic.join(WAIT_S)
    assert idle is True
    assert _abandoned(caplog) == []


def test_a_stop_as_the_automatic_retrains_thread_starts_abandons_it_and_hears_nothing_after(
    live_settings: Settings, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    starting, go = threading.Event(), threading.Event()
    with TestClient(create_app(with_settings(live_settings, retrain_every_steps=EVERY))) as client:
        retrainer = _started(client)
        monkeypatch.setattr(retrainer, "_retrain", _held_at(starting, go, retrainer._retrain))
        automatic = _automatic(retrainer)
        assert starting.wait(WAIT_S)  # its thread runs, its retrain not yet begun
        idle = retrainer.stop(0.0)
        said = len(caplog.records)
        go.set()
        automatic.join(WAIT_S)
        assert not automatic.is_alive()
    assert idle is False
    [line] = _abandoned(caplog)
    assert "stores no version" in line
    retrains = ("service.models", "service.retrain")
    assert [r.getMessage() for r in caplog.records[said:] if r.name in retrains] == []


def test_a_stop_between_the_automatic_retrains_done_line_and_its_end_says_its_version_is_stored(
    live_settings: Settings, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The automatic retrain's thread stays past its fence from its ``retrain done`` line to its end
    (``_end``): its version is stored, and a stop that abandons it there says so, not that it stores none."""
    caplog.set_level(logging.INFO)
    ending, go = threading.Event(), threading.Event()
    with TestClient(create_app(with_settings(live_settings, retrain_every_steps=EVERY))) as client:
        retrainer = _started(client)
        monkeypatch.setattr(retrainer, "_end", _held_at(ending, go, retrainer._end))
        automatic = _automatic(retrainer)
        assert ending.wait(WAIT_S)  # its done line said, its end not yet
        idle = retrainer.stop(0.0)
        go.set()
        automatic.join(WAIT_S)
        assert not automatic.is_alive()
    assert idle is False
    [line] = _abandoned(caplog)
    assert "storing its version" in line
    assert any(r.getMessage() == "retrain done" for r in caplog.records)

"""A published step's bookkeeping not begun when the replica stops leaves the request's planning
thread, through the route (``schedules.py`` hands ``post_publish.bounded`` the app's stop); the
bookkeeping itself is ``test_post_publish_stop.py``'s."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.settings import Settings
from tests.service.api_helpers import batch_body

WAIT_S = 30.0  # a bound against never, for a loaded host


def test_the_bookkeeping_left_at_the_stop_goes_on_a_daemon_not_the_planning_thread(
    live_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stop comes as the step enters its set (the first step after the publish, no caller's
    deadline: run in line): the profiles, the next step, run on the stop's daemon, and the request
    is answered all the same."""
    app = create_app(live_settings)
    ran: dict[str, threading.Thread] = {}
    with TestClient(app) as client:
        ctx = app.state.context
        enter, remember = ctx.delivery.enter_step, ctx.speeds.remember

        def entering(*args: Any, **kwargs: Any) -> object:
            ran["set"] = threading.current_thread()
            app.state.stopping.set()
            return enter(*args, **kwargs)

        def remembering(*args: Any, **kwargs: Any) -> object:
            ran["profiles"] = threading.current_thread()
            return remember(*args, **kwargs)

        monkeypatch.setattr(ctx.delivery, "enter_step", entering)
        monkeypatch.setattr(ctx.speeds, "remember", remembering)
        answer = client.post("/schedule", json=batch_body(schedule_id="kept-on", step=3))
        deadline = time.monotonic() + WAIT_S
        while "profiles" not in ran:
            assert time.monotonic() < deadline, "the profiles were never remembered"
            time.sleep(0.01)
    assert answer.status_code == 200, answer.text
    profiles = ran["profiles"]
    assert (profiles is ran["set"], profiles.name, profiles.daemon) == (False, "after-publish-stopped", True)

"""The pull server's signal handler, called as the signals come: a second signal hurries the drain
and says so once, and a third before the loop has set the hurry says nothing more
(docs/sidecar.md: "a third and later one change nothing and say nothing"). The handler asks the
loop to set the hurry at its next step; a third signal between the two once logged "second
signal" again (a fresh-clone CI's ``test_second_signal``, pull mode)."""

from __future__ import annotations

import asyncio
import logging
import signal

import pytest
import uvicorn

from service.sidecar.hurry import Hurry
from service.sidecar.pull_server import PullServer


async def _app(scope: object, receive: object, send: object) -> None:
    """Never served: the handler is called directly."""


def test_a_third_signal_before_the_loop_sets_the_hurry_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    hurry = Hurry(grace_s=1.0)
    server = PullServer(uvicorn.Config(_app), hurry)

    async def signals() -> None:
        for _ in range(3):  # one after another, the loop taking no step between them
            server.handle_exit(signal.SIGTERM, None)
        assert not hurry.is_set()  # asked of the loop, not yet set
        await asyncio.sleep(0)
        assert hurry.is_set()

    with caplog.at_level(logging.WARNING, logger="service.sidecar"):
        asyncio.run(signals())
    assert server.should_exit
    assert [r.getMessage()[:14] for r in caplog.records if r.name == "service.sidecar"] == ["second signal:"]

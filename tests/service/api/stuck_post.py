"""The test side of ``stuck_call``: the step a test POSTs to a ``serve`` whose publish never returns,
so that its planning thread sits in that call when the test stops the child (the exit guard's, the
second signal's and the force-quit's tests)."""

from __future__ import annotations

import contextlib
import threading

import httpx

from tests.service.api_helpers import batch_body


def post_stuck(url: str, wait_s: float) -> None:
    """POST, on a daemon thread, a step whose publish never returns; its connection is cut at the
    stop (within ``wait_s``, a bound against never)."""

    def post() -> None:
        with contextlib.suppress(httpx.HTTPError):
            httpx.post(f"{url}/schedule", json=batch_body(step=1, policy="lpt"), timeout=wait_s)

    threading.Thread(target=post, daemon=True).start()

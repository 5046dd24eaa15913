"""The test side of ``stuck_call``: the step a test POSTs to a ``serve`` whose publish never returns,
so that its planning thread sits in that call when the test stops the child (the exit guard's, the
second signal's and the force-quit's tests); and that ``serve``, stopped once the call is under way
(the second signal's and the force-quit's one way to start, each stating only its later signals)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx

from tests.service.api.stopped_child import CUT_AFTER_S, began, serving
from tests.service.api.stuck_call import JOINING, STARTED, URL
from tests.service.api_helpers import batch_body

STUCK = "tests.service.api.stuck_call"  # serve, its publish a call that never returns


def post_stuck(url: str, wait_s: float) -> None:
    """POST, on a daemon thread, a step whose publish never returns; its connection is cut at the
    stop (within ``wait_s``, a bound against never)."""

    def post() -> None:
        with contextlib.suppress(httpx.HTTPError):
            httpx.post(f"{url}/schedule", json=batch_body(step=1, policy="lpt"), timeout=wait_s)

    threading.Thread(target=post, daemon=True).start()


@contextlib.contextmanager
def stopped_while_stuck(
    redis_url: str,
    model_dir: Path,
    wait_s: float,
    first: signal.Signals,
    graceful_s: int | None = CUT_AFTER_S,
) -> Iterator[tuple[subprocess.Popen[str], str, Path]]:
    """``serve`` on ``redis_url`` (a 1 s command timeout, the graceful wait ``graceful_s``: ``serving``'s)
    with a step posted whose publish never returns, sent ``first`` once that call is under way (within
    ``wait_s``): the process, its base URL, and the file its exit creates as it begins to join the
    stuck thread (``stuck_call``'s ``JOINING``)."""
    started, joining = model_dir / "started", model_dir / "joining"
    planted = {STARTED: str(started), URL: redis_url, JOINING: str(joining)}
    with serving(STUCK, redis_url, model_dir, 1, wait_s, graceful_s, **planted) as (proc, url):
        post_stuck(url, wait_s)
        began(started, proc, wait_s)
        proc.send_signal(first)
        yield proc, url, joining

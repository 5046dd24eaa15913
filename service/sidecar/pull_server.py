"""The pull API's uvicorn server, whose second SIGTERM or SIGINT hurries the shutdown instead of
skipping it.

Why. uvicorn drains on the first signal. A second SIGTERM it ignored: the requests in flight kept the
drain timeout, and what the worker held its hand-back, however long a stalled Redis made them wait.
A second SIGINT (Ctrl-C twice) set its ``force_exit``, which stops waiting for the requests but also
skips the app's lifespan shutdown: what the worker held was neither handed back nor counted (the
counters printed at exit had ``claimed`` ahead of what ended, for good), the presence key was left to
lapse, and the Redis connections were not hung up, so the exit waited out a socket timeout on a
stalled server. Here either second signal sets the ``Hurry`` the app was built with (``hurry.py``):
the requests in flight are given up at once (``pull_drain``), and the lifespan still hands back,
within the release grace of that signal, what Redis will take; the rest lapses, counted ``lost``.

Imported by pull mode only (``launch._pull_server``): push mode loads no uvicorn.
"""

from __future__ import annotations

import asyncio
import logging
from types import FrameType

import uvicorn

from service.sidecar.hurry import Hurry

log = logging.getLogger("service.sidecar")


class PullServer(uvicorn.Server):
    """``uvicorn.Server``, a second signal setting ``hurry`` rather than uvicorn's ``force_exit``."""

    def __init__(self, config: uvicorn.Config, hurry: Hurry) -> None:
        super().__init__(config)
        self.hurry = hurry
        self._hurried = False  # said and asked for here, before the loop sets ``hurry``

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """The first signal drains (uvicorn's own); a later one hurries the drain, once."""
        if not self.should_exit:
            super().handle_exit(sig, frame)
            return
        # not ``hurry.is_set()`` alone: the loop sets it at its next step, and a third signal before
        # that said "second signal" again (seen once in a fresh-clone CI's test_second_signal)
        if self._hurried or self.hurry.is_set():
            return
        self._hurried = True
        log.warning("second signal: giving up on the requests in flight and releasing what is held now")
        try:  # from a signal handler: the loop sets it between its own steps
            asyncio.get_running_loop().call_soon_threadsafe(self.hurry.set)
        except RuntimeError:  # no loop running (the server not yet serving, or done)
            self.hurry.set()

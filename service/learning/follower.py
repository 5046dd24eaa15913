"""Follow the actuals stream and the model store off the request path, so a replica's ``/schedule``
finds both folded.

``ModelService.predict`` folds the actuals appended since its last sync before it predicts, so every
replica predicts from the same history. The replica that stored a batch folds it at once
(``POST /actuals``); every other replica used to fold it on its next ``/schedule``, on the request's
path and uncut by its deadline: a step's 32,768 actuals cost that request 1.1-1.2 s and 131,072 cost
4.1 s (an embedded valkey on a loaded 2-core host; the plan itself ~70 ms at 1,024 x 16: the
measurement in docs/experiments.md, refresh49). This thread checks the stream's newest id every
``ROLLOUT_ACTUALS_FOLLOW_S`` (0.25 s; one ``XREVRANGE ... COUNT 1``) and, when it moved, runs the
same sync, then warms the next step's fold (``ModelService.follow``), as ``POST /actuals`` does on the
replica that took them.

A request arriving while this thread folds waits for it ``models.FOLD_WAIT_S`` (50 ms) at most (it
had waited the fold out, up to the whole 1.2 s: periodic50), so a trickle's fold is still read, and
a step's is not waited for: the request predicts from the history as last folded, and the rows under
way are in the next request's (``ModelService.predict``). With no fold under way it still syncs
before it predicts, so it reads every actual stored before it started that no fold has taken.

A tick also picks up a model version another replica's retrain stored (``ModelService.reload``: a
listing of the store, and the load, 8-9 ms, when there is a new one), which the request had done on
its path; at most once every ``models.RELOAD_EVERY_S`` (1 s, its own clock), as the request did: a
listing at every tick was four a second per replica, on a network volume (review50b). A request
starting ``RELOAD_EVERY_S`` plus one follow period after the version was stored predicts with it
(plus the tick's own time); one that does not load keeps the model held, logged once
(``model store: ...``).

A failed follow (Redis down) is tried again at the next tick and logged once per outage, at its
second failure in a row: a replica's stop under ``make run`` (the process group's SIGTERM reached the
embedded server first, before it ran in a session of its own: ``service/embedded.py``) failed one last
follow before the stop halted the thread, a warning on every Ctrl-C; the request's own sync meets an
outage as before. The thread's lifecycle is
``service.periodic``'s, as the reaper's.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

from service.learning import models as models_module
from service.learning.models import ModelService
from service.periodic import Outage, Periodic

_log = logging.getLogger("service.models")


class Follower:
    """A daemon thread running ``follow`` every ``every_s`` and ``ModelService.reload`` at most every
    ``RELOAD_EVERY_S`` (on ``clock``); ``start``/``stop`` idempotent. While it runs, requests leave
    both to it."""

    def __init__(
        self, models: ModelService, every_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.models = models
        self.every_s = every_s
        self._clock = clock
        self._checked_at = -math.inf  # the last tick that listed the store: the first tick does
        self.folded = 0  # the actuals the last tick folded (0 when it failed, or nothing was new)
        # the outage said at its second failure in a row: a stop's one last failed follow is not one
        outage = Outage(_log, "following the actuals stream failed (%s); requests fold what arrives", 2)
        self._periodic = Periodic("actuals-follower", self._tick, every_s, outage)

    def start(self) -> Follower:
        """Start following in the background; requests leave the model's reload to it from now on."""
        self.models.followed = True
        self._periodic.start()
        return self

    def _tick(self) -> bool:
        self.folded = 0
        now = self._clock()
        if now - self._checked_at >= models_module.RELOAD_EVERY_S:
            self._checked_at = now
            self.models.reload()
        self.folded = self.models.follow()
        return True

    def follow_once(self) -> int:
        """One tick: the actuals folded (0 when the stream had nothing new); never raises (a thread's
        error reaches no caller: the next request's sync folds, or meets the outage, itself)."""
        self._periodic.run_once()
        return self.folded

    def halt(self) -> None:
        """Start no follow after the current one (``stop`` waits for it)."""
        self._periodic.halt()

    def stop(self, timeout_s: float = 5.0) -> bool:
        """Stop after the current follow, waiting ``timeout_s`` at most; whether it ended. A fold still
        reading Redis then must keep its pool open (as the reaper's pass: ``service.startup``)."""
        return self._periodic.stop(timeout_s)

"""Follow the actuals stream off the request path, so a replica's ``/schedule`` finds it folded.

``ModelService.predict`` folds the actuals appended since its last sync before it predicts, so every
replica predicts from the same history. The replica that stored a batch folds it at once
(``POST /actuals``); every other replica used to fold it on its next ``/schedule``, on the request's
path and uncut by its deadline: a step's 32,768 actuals cost that request 1.1-1.2 s and 131,072 cost
4.1 s (an embedded valkey on a loaded 2-core host; the plan itself ~70 ms at 1,024 x 16: the
measurement in docs/experiments.md, refresh49). This thread checks the stream's newest id every
``ROLLOUT_ACTUALS_FOLLOW_S`` (0.25 s; one ``XREVRANGE ... COUNT 1``) and, when it moved, runs the
same sync, then warms the next step's fold (``ModelService.follow``), as ``POST /actuals`` does on the
replica that took them.

Predictions do not change: the request still syncs before it predicts, under the same lock, so it
reads every actual stored before it started; it only finds the fold done (or waits for the
follower's fold under way, which it would have run itself). A failed follow (Redis down) is tried
again at the next tick and logged once per outage, at its second failure in a row: a replica's stop
under ``make run`` (the process group's SIGTERM reaches the embedded server first) failed one last
follow before the stop halted the thread, a warning on every Ctrl-C; the request's own sync meets an
outage as before.
"""

from __future__ import annotations

import logging
import threading

from service.learning.models import ModelService

_log = logging.getLogger("service.models")


class Follower:
    """A daemon thread running ``ModelService.follow`` every ``every_s``; ``start``/``stop`` idempotent."""

    def __init__(self, models: ModelService, every_s: float) -> None:
        self.models = models
        self.every_s = every_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failed = 0  # follows failed in a row (the outage logged once, at the second)

    def start(self) -> Follower:
        """Start following in the background."""
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="actuals-follower", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.follow_once()

    def follow_once(self) -> int:
        """One tick: the actuals folded (0 when the stream had nothing new); never raises (a thread's
        error reaches no caller: the next request's sync folds, or meets the outage, itself)."""
        try:
            folded = self.models.follow()
        except Exception as error:
            self._failed += 1
            if self._failed == 2:
                _log.warning("following the actuals stream failed (%s); requests fold what arrives", error)
            return 0
        self._failed = 0
        return folded

    def halt(self) -> None:
        """Start no follow after the current one (``stop`` waits for it)."""
        self._stop.set()

    def stop(self, timeout_s: float = 5.0) -> bool:
        """Stop after the current follow, waiting ``timeout_s`` at most; whether it ended. A fold still
        reading Redis then must keep its pool open (as the reaper's pass: ``service.startup``)."""
        self.halt()
        thread, self._thread = self._thread, None
        if thread is None:
            return True
        thread.join(timeout_s)
        return not thread.is_alive()

"""Retraining the length predictor from actuals: on demand and automatically at step boundaries.

A retrain fits on the history this replica holds (the newest ``Settings.actuals_maxlen`` actuals:
the stream trims older ones, ``service.learning.models``), writes a new version to the model store and swaps
it into the serving predictor; requests keep being answered by the previous version until the swap.
``POST /models/retrain`` runs one now. With ``retrain_every_steps = N``, the first ``POST /schedule``
of a step at least N past the last retrained step starts one in the background:
by then the actuals of every earlier step are in, which is the step boundary the trainer sees.

Replicas coordinate through two keys (named, with their TTLs, in ``service/delivery/keys.py``): the
retrain lock, one retrain at a time across replicas, with the fencing token each lock taken draws
(``service.learning.retrain_lock``), and the mark of the last retrained step, which a boundary claims
(``service.learning.retrain_boundary``); a boundary met while a retrain runs anywhere is left for the
next step to claim. Other replicas pick the new version up by hot reload.

The replica's stop (``Startup.halt``) halts the retrainer: no retrain starts after it, and one under
way gives up at its fit's next boosting round (``predictors.cutoff``, checked by ``predictors.model``)
or at its fence before storing, whichever comes first, storing nothing (``RetrainStoppedError``,
counted ``stopped``). The stop then waits for it, within the stop's one window (``Retrainer.stop``).
It ran on: a test's automatic retrain, started by its last step, logged ``automatic retrain
skipped`` after the app and its log stream had closed (``--- Logging error ---``), and a service's could
fit on past its stop. A retrain the window does not see end (inside a stalled Redis call, or a
stretch of the fit with no check: building the training set) is abandoned: its version is not stored
(the fence checks the halt), the stop says so in one line, and the retrain's own lines after it
are dropped (``_say``), so the stop's line is the retrain's last. One past its fence at the halt
stores its version whole, as that line says (``Retrainer._fence``, ``release_at_stop``), and one
that ended while the stop waited to say it is not abandoned: the stop decides again (``Retrainer.stop``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from predictors import cutoff
from scheduler.errors import InvalidInputError
from service.delivery import keys
from service.delivery.errors import REDIS_FAILED
from service.learning.models import ModelService
from service.learning.retrain_boundary import StepBoundary
from service.learning.retrain_lines import muted_once
from service.learning.retrain_lock import RetrainLock, brief
from service.logs import mark_logged, schedule_only_context
from service.metrics import Metrics
from service.problems.table import ConflictError, RetrainStoppedError, ServiceError
from service.redis_conn import RedisClient

_log = logging.getLogger("service.retrain")


@dataclass(frozen=True)
class RetrainResult:
    """What one retrain produced."""

    version: str  # "v<N>"
    history_rows: int  # actuals it was fitted on
    seconds: float  # wall time of fit + save + swap


class Retrainer:
    """Runs retrains one at a time (per process and across replicas)."""

    def __init__(
        self,
        models: ModelService,
        client: RedisClient,
        metrics: Metrics,
        every_steps: int,
        prefix: str = keys.DEFAULT_PREFIX,
    ) -> None:
        self._models = models
        self._redis = client
        self._metrics = metrics
        self._every = every_steps
        self._running = threading.Lock()
        self.background: threading.Thread | None = None  # the last automatic retrain, if any
        self._halted = threading.Event()  # the replica stops: none starts, one under way gives up
        self.lock = RetrainLock(client, metrics, prefix, self._say, self._halted)
        self.boundary = StepBoundary(client, every_steps, prefix)
        # a line (here, or through the model service: ``retrain_lines``) and the abandonment are one
        # after the other, never both; reentrant, as a handler may log while it outputs a line
        self._said = threading.RLock()
        self._abandoned = False  # the stop stopped waiting for a retrain: its lines are dropped
        # the retrain's thread past its fence, until its last line (``_done``, ``_end``): its version is
        # stored, stop or not
        self._storing: threading.Thread | None = None
        self._background_ended = True  # the automatic retrain's thread said its last line (``_end``)

    @property
    def running(self) -> bool:
        """Whether this process is retraining now."""
        return self._running.locked()

    def running_anywhere(self) -> bool:
        """Whether this or another replica is retraining now (the shared lock is held): what a
        ``POST /models/retrain`` on any replica would be refused for."""
        return self.running or bool(self._redis.exists(self.lock.key))

    def retrain_now(self, trigger: str = "request", step: int | None = None) -> RetrainResult:
        """Retrain synchronously; ``ConflictError`` (409) when one is already running or data is too thin.

        Every attempt is counted by outcome (``ok``, ``busy``, ``insufficient_data``, ``error``), the
        on-demand ones too, so a failing store shows on the dashboard and not only in a 503. A
        retrain done logs one ``retrain done`` line (version, rows, seconds, and ``trigger``:
        ``request`` or ``step``), so a slow or surprising model swap is found in the log; one that
        fails logs one ``retrain failed`` line with its reason (``_failure``), on either trigger.
        ``step``: the step whose first plan started it (``after_step``), before which every step is
        complete; None for one asked for (``ModelService.retrain`` then reads the step planned last)."""
        return self._retrain(trigger, step, background=False)

    def _end(self) -> None:
        """The automatic retrain's thread ends, its last line said: one step for ``stop``, which
        otherwise took a retrain that had stored its version and ended for one still running that
        stores none (stopline53)."""
        with self._said:
            if self._storing is threading.current_thread():
                self._storing = None
            self._background_ended = True

    def _retrain(self, trigger: str, step: int | None, background: bool) -> RetrainResult:
        """One retrain, its outcome counted and said in one line (``retrain_now``). That line and
        ``_running``'s release are one step under ``_said`` (``_done``): ``stop`` decides by
        ``_running`` whether a retrain asked for still runs, and a stop that took it between the
        release and ``retrain done`` answered that none ran, then the line came after it (learn54)."""
        if not self._running.acquire(blocking=False):
            self._metrics.retrains.labels("busy").inc()
            raise ConflictError("a retrain is already running in this replica")
        try:
            with cutoff.checking(self._unless_halted), muted_once(self._said, lambda: self._abandoned):
                result = self._locked_retrain(step)
        except BaseException as error:
            with self._done(background):
                self._say_failed(trigger, error)
            raise
        with self._done(background):
            self._say(
                logging.INFO,
                "retrain done",
                extra={
                    "trigger": trigger,
                    "model_version": result.version,
                    "history_rows": result.history_rows,
                    "seconds": round(result.seconds, 3),
                },
            )
        return result

    @contextmanager
    def _done(self, background: bool) -> Iterator[None]:
        """Within: a retrain's outcome line; after it, in the same hold of ``_said``, ``_running``
        free, and a retrain asked for, past its fence, no longer storing (its thread says no more).
        The automatic one's thread may still say ``automatic retrain skipped``: it stays
        ``_storing`` until its end (``_end``), which ``stop`` waits for (``_under_way``)."""
        with self._said:
            try:
                yield
            finally:
                self._running.release()
                if not background and self._storing is threading.current_thread():
                    self._storing = None

    def _say_failed(self, trigger: str, error: BaseException) -> None:
        """The one line of a retrain that stored nothing, counted by outcome: a ``ConflictError`` was
        counted where it was decided and says nothing (a request's 409 says it; the automatic one's
        ``automatic retrain skipped``)."""
        if isinstance(error, RetrainStoppedError):
            self._metrics.retrains.labels("stopped").inc()
            self._say(logging.INFO, "retrain stopped: %s", error.detail, extra={"trigger": trigger})
            mark_logged(error)
        elif isinstance(error, Exception) and not isinstance(error, ConflictError):
            self._metrics.retrains.labels("error").inc()
            reason, traceback = _failure(trigger, error)
            self._say(
                logging.ERROR, "retrain failed: %s", reason, extra={"trigger": trigger}, exc_info=traceback
            )
            mark_logged(error)  # the request's answer does not log it again

    def _locked_retrain(self, step: int | None) -> RetrainResult:
        self._unless_halted()
        self.lock.release_leftover()
        token = self.lock.take()
        if token is None:
            self._metrics.retrains.labels("busy").inc()
            raise ConflictError("a retrain is already running in another replica")
        done = threading.Event()
        keeper = threading.Thread(target=self.lock.keep, args=(token, done), daemon=True)
        keeper.start()
        try:
            fence_token = self.lock.next_fence_token(self._models.highest_fence_token())
            version, rows, seconds = self._models.retrain(
                fence=self._fence(token), fence_token=fence_token, planned_step=step
            )
        except InvalidInputError as error:
            self._metrics.retrains.labels("insufficient_data").inc()
            raise ConflictError(f"not enough actuals to train on: {error.reason}", field="history") from None
        finally:
            done.set()
            self.lock.release()
        self._metrics.retrains.labels("ok").inc()
        return RetrainResult(f"v{version}", rows, seconds)

    def _fence(self, token: str) -> Callable[[], None]:
        """The fence a version is stored between (``ModelService.retrain`` runs it before the store and
        once it is in place): before, not once the replica stops nor once the lock lapsed; after, the
        lock only. A stop during the store took back a complete version with the current fencing token
        after its rename, one other replicas could have loaded, or read half removed (review52d)."""
        passed = False

        def fence() -> None:
            nonlocal passed
            if not passed:
                with self._said:  # the halt's check and ``_storing`` are one step for ``stop``'s line
                    self._unless_halted()
                    self._storing = threading.current_thread()  # until its last line (``_done``, ``_end``)
                    passed = True
            self.lock.still_held(token)

        return fence

    def _unless_halted(self) -> None:
        """``RetrainStoppedError`` once the replica stops (``halt``): a fit that would be stored after
        the stop writes the model store under a replica that is gone, and logs past its stop."""
        if self._halted.is_set():
            raise RetrainStoppedError("the replica is stopping: the retrain gave up, nothing stored")

    def halt(self) -> None:
        """Start no retrain from now on, and make one under way give up at its next check (module doc;
        its lines through the model service end at the stop's: ``retrain_lines``). Idempotent."""
        self._halted.set()

    def stop(self, timeout_s: float) -> bool:
        """``halt``, then wait ``timeout_s`` at most for a retrain under way (asked for, or the
        automatic one's thread, its last line included); whether none runs now. One that still
        runs is abandoned: it stores nothing (its fence checks the halt) unless it was past its
        fence, storing its version (``_fence``), this says so once, saying which, and none of its
        lines come after that one (``_say``). Whether it still runs is decided again under the lock
        that line is said under: one that ended while the stop waited for that lock is none (``_end``).
        A retrain asked for frees ``_running`` only with its last line said (``_done``): a stop that
        takes it answers True with every line of that retrain before its answer."""
        self.halt()
        until = time.monotonic() + timeout_s
        idle = self._running.acquire(timeout=timeout_s)
        if idle:
            self._running.release()
        background = self.background
        if background is not None:
            background.join(max(0.0, until - time.monotonic()))
            idle = idle and not background.is_alive()
        if not idle:
            with self._said:
                idle = not self._under_way(background)
                if not idle:
                    self._abandoned = True
                    storing = self._storing is not None
                    _log.warning(
                        "retrain abandoned at the stop: still running after %.1f s; %s and logs nothing more",
                        timeout_s,
                        "past its fence, it is storing its version," if storing else "it stores no version",
                    )
        return idle

    def _under_way(self, background: threading.Thread | None) -> bool:
        """Whether a retrain has not ended (``_done``, ``_end``), read under ``_said``: one holds
        ``_running``, or is past its fence, or the automatic one's thread has not said its last line."""
        pending = background is not None and background.is_alive() and not self._background_ended
        return self._running.locked() or self._storing is not None or pending

    def _say(self, level: int, message: str, *args: object, **kwargs: Any) -> None:
        """Log a line of a retrain's, unless the stop has abandoned it (``stop``): a line after the
        stop's is one no log stream may be open for any more."""
        with self._said:
            if not self._abandoned:
                _log.log(level, message, *args, **kwargs)

    def release_at_stop(self) -> None:
        """``release`` at the stop (``Startup.halt``), unless a retrain is past its fence, storing its
        version: it gives the lock back itself once stored (abandoned, the lock lapses by its TTL),
        and one released under it had its complete version taken back by its last fence (review52d)."""
        with self._said:  # after the halt: a retrain not storing now never passes its fence
            storing = self._storing is not None  # None again only once it released the lock itself
        if not storing:
            self.lock.release()

    def after_step(self, step: int) -> bool:
        """Start a background retrain if ``step`` is a configured boundary; True if one started."""
        if self._every <= 0 or self.running or self._halted.is_set():
            return False
        self.lock.release_leftover()  # this replica's own lock, left by a failed release, is no fit running
        if self.running_anywhere():
            return False  # a boundary met while a fit runs is claimed by the next step after it
        if not self.boundary.claims(step):
            return False
        # its lines carry the schedule id of the step that started it, and nothing else of the request's
        # context: no deadline of the caller's, nor the stop's clock (``logs.schedule_only_context``)
        self._background_ended = False
        self.background = threading.Thread(
            target=schedule_only_context().run,
            args=(self._background, step),
            name=f"retrain-step-{step}",
            daemon=True,
        )
        self.background.start()
        return True

    def _background(self, step: int) -> None:
        try:
            self._retrain("step", step, background=True)  # the steps before ``step`` are complete
        except ConflictError as error:
            self._say(logging.INFO, "automatic retrain skipped: %s", error.detail)
        except Exception:
            return  # counted and logged ("retrain failed", "retrain stopped") by _retrain
        finally:
            self._end()


def _failure(trigger: str, error: Exception) -> tuple[str, bool]:
    """What the one ``retrain failed`` line says: its reason (the store's path where the store
    failed), and whether it keeps the traceback.

    A store or Redis fault is the line alone: expected in operation, and what to fix is in the
    reason. Anything else is a bug, and keeps its traceback where nothing else logs one: a failed
    automatic retrain (a request's 500 is logged by the server, traceback and all)."""
    expected = isinstance(error, (ServiceError, *REDIS_FAILED))
    reason = error.detail if isinstance(error, ServiceError) else brief(error)
    return reason, not expected and trigger != "request"

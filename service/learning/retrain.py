"""Retraining the length predictor from actuals: on demand and automatically at step boundaries.

A retrain fits on the history this replica holds (the newest ``Settings.actuals_maxlen`` actuals:
the stream trims older ones, ``service.learning.models``), writes a new version to the model store and swaps
it into the serving predictor; requests keep being answered by the previous version until the swap.
``POST /models/retrain`` runs one now. With ``retrain_every_steps = N``, the first ``POST /schedule``
of a step at least N past the last retrained step starts one in the background:
by then the actuals of every earlier step are in, which is the step boundary the trainer sees.

Replicas coordinate through two keys (named, with their TTLs, in ``service/delivery/keys.py``):
``keys.retrain_lock`` (``SET NX`` with ``RETRAIN_LOCK_TTL_S``, renewed while the fit runs and
released when the replica stops, so a replica stopped or killed mid-retrain holds it back a minute
at most) allows one retrain at a time across replicas; a fit that finds it lost before storing its
version stores nothing, since another replica may have fitted newer actuals meanwhile. Each lock
taken draws a fencing token from ``keys.retrain_fence``, stored with the version: a fit whose lock
lapsed between that check and the rename lands a version of a lower token than the newer one
stored meanwhile, which no replica serves (``predictors.store``). And
``keys.retrain_step`` holds the step the last automatic retrain started at (the first step seen,
before any; ``POST /models/retrain`` leaves it); a boundary met while a retrain runs anywhere is left
for the next step to claim. Other replicas pick the new version up by hot reload.

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
stores its version whole, as that line says (``Retrainer._fence``, ``release_at_stop``).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from predictors import cutoff
from scheduler.errors import InvalidInputError
from service.delivery import keys
from service.delivery.errors import REDIS_FAILED
from service.learning.models import ModelService
from service.learning.retrain_lines import muted_once
from service.logs import mark_logged, schedule_only_context
from service.metrics import Metrics
from service.problems.table import ConflictError, RetrainStoppedError, ServiceError
from service.redis_conn import RedisClient

_log = logging.getLogger("service.retrain")
_COMPARE_AND_SET = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('SET', KEYS[1], ARGV[2]) return 1 end
return 0
"""
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('EXPIRE', KEYS[1], ARGV[2]) end
return 0
"""
# the next fencing token, past every token the store holds: a Redis that lost the counter (restarted
# without its AOF) would otherwise hand out tokens below the stored versions', superseding each new one
_NEXT_FENCE = """
local token = redis.call('INCR', KEYS[1])
local floor = tonumber(ARGV[1])
if token <= floor then token = floor + 1 redis.call('SET', KEYS[1], token) end
return token
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


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
        self._lock_key = keys.retrain_lock(prefix)
        self._fence_key = keys.retrain_fence(prefix)
        self.step_key = keys.retrain_step(prefix)
        self._advance = client.register_script(_COMPARE_AND_SET)
        self._renew = client.register_script(_RENEW)
        self._next_fence = client.register_script(_NEXT_FENCE)
        self._release = client.register_script(_RELEASE)
        self._token: str | None = None  # the retrain lock's owner token while this replica holds it
        self._unreleased: str | None = None  # a token whose release failed (Redis was down then)
        self._running = threading.Lock()
        self.background: threading.Thread | None = None  # the last automatic retrain, if any
        self._halted = threading.Event()  # the replica stops: none starts, one under way gives up
        self._said = threading.Lock()  # a line and the abandonment are one after the other, never both
        self._abandoned = False  # the stop stopped waiting for a retrain: its lines are dropped
        self._storing = False  # a retrain is past its fence: its version is stored, stop or not

    @property
    def running(self) -> bool:
        """Whether this process is retraining now."""
        return self._running.locked()

    def running_anywhere(self) -> bool:
        """Whether this or another replica is retraining now (the shared lock is held): what a
        ``POST /models/retrain`` on any replica would be refused for."""
        return self.running or bool(self._redis.exists(self._lock_key))

    def retrain_now(self, trigger: str = "request", step: int | None = None) -> RetrainResult:
        """Retrain synchronously; ``ConflictError`` (409) when one is already running or data is too thin.

        Every attempt is counted by outcome (``ok``, ``busy``, ``insufficient_data``, ``error``), the
        on-demand ones too, so a failing store shows on the dashboard and not only in a 503. A
        retrain done logs one ``retrain done`` line (version, rows, seconds, and ``trigger``:
        ``request`` or ``step``), so a slow or surprising model swap is found in the log; one that
        fails logs one ``retrain failed`` line with its reason (``_failure``), on either trigger.
        ``step``: the step whose first plan started it (``after_step``), before which every step is
        complete; None for one asked for (``ModelService.retrain`` then reads the step planned last)."""
        if not self._running.acquire(blocking=False):
            self._metrics.retrains.labels("busy").inc()
            raise ConflictError("a retrain is already running in this replica")
        try:
            with cutoff.checking(self._unless_halted), muted_once(lambda: self._abandoned):  # see halt
                result = self._locked_retrain(step)
        except ConflictError:
            raise  # counted where it was decided
        except RetrainStoppedError as error:
            self._metrics.retrains.labels("stopped").inc()
            self._say(logging.INFO, "retrain stopped: %s", error.detail, extra={"trigger": trigger})
            mark_logged(error)
            raise
        except Exception as error:
            self._metrics.retrains.labels("error").inc()
            reason, traceback = _failure(trigger, error)
            self._say(
                logging.ERROR, "retrain failed: %s", reason, extra={"trigger": trigger}, exc_info=traceback
            )
            mark_logged(error)  # the request's answer does not log it again
            raise
        finally:
            self._storing = False
            self._running.release()
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

    def _locked_retrain(self, step: int | None) -> RetrainResult:
        self._unless_halted()
        self._release_leftover()
        token = uuid.uuid4().hex
        if not self._redis.set(self._lock_key, token, nx=True, ex=keys.RETRAIN_LOCK_TTL_S):
            self._metrics.retrains.labels("busy").inc()
            raise ConflictError("a retrain is already running in another replica")
        self._token, done = token, threading.Event()
        keeper = threading.Thread(target=self._keep_lock, args=(token, done), daemon=True)
        keeper.start()
        try:
            fence_token = int(
                self._next_fence(keys=[self._fence_key], args=[self._models.highest_fence_token()])
            )
            version, rows, seconds = self._models.retrain(
                fence=self._fence(token), fence_token=fence_token, planned_step=step
            )
        except InvalidInputError as error:
            self._metrics.retrains.labels("insufficient_data").inc()
            raise ConflictError(f"not enough actuals to train on: {error.reason}", field="history") from None
        finally:
            done.set()
            self.release()
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
                    self._storing = passed = True  # reset as the retrain ends (``retrain_now``)
            self._still_held(token)

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
        lines come after that one (``_say``)."""
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
                self._abandoned = True
                _log.warning(
                    "retrain abandoned at the stop: still running after %.1f s; %s and logs nothing more",
                    timeout_s,
                    "past its fence, it is storing its version," if self._storing else "it stores no version",
                )
        return idle

    def _say(self, level: int, message: str, *args: object, **kwargs: Any) -> None:
        """Log a line of a retrain's, unless the stop has abandoned it (``stop``): a line after the
        stop's is one no log stream may be open for any more."""
        with self._said:
            if not self._abandoned:
                _log.log(level, message, *args, **kwargs)

    def _still_held(self, token: str) -> None:
        """``ConflictError`` unless this fit still holds the retrain lock, renewed by this check.

        The lock can lapse under a fit (Redis down or the process paused past its TTL, so renewals
        failed), and another replica then takes it and fits on newer actuals. Publishing anyway
        stored two versions out of order: the stale one, finishing last, got the higher number,
        and every replica served it. The check and the store's rename are not one atomic step: a
        fit paused between them still renames its version in, and the version's fencing token
        (taken with the lock, lower than the other replica's) makes every reader pass it over
        (``predictors.store``); checked again after the rename, this fit then takes it back."""
        if not self._renew(keys=[self._lock_key], args=[token, keys.RETRAIN_LOCK_TTL_S]):
            self._metrics.retrains.labels("busy").inc()
            raise ConflictError(
                f"the retrain lock lapsed while this replica fitted (held past its "
                f"{keys.RETRAIN_LOCK_TTL_S} s without a renewal); another replica may have retrained "
                "on newer actuals since, so this fit was not stored",
                field="retrain_lock",
            )

    def _keep_lock(self, token: str, done: threading.Event) -> None:
        """Renew the lock every third of its TTL until ``done``: a short TTL frees it soon after a
        crash, renewal keeps it through a long fit. A lock found lost is said once; the fit goes on
        and is not stored (``_still_held``)."""
        while not done.wait(keys.RETRAIN_LOCK_TTL_S / 3) and not self._halted.is_set():
            try:
                held = self._renew(keys=[self._lock_key], args=[token, keys.RETRAIN_LOCK_TTL_S])
            except Exception as error:  # Redis down: the lock may lapse; the fit itself goes on
                self._say(
                    logging.WARNING,
                    "could not renew the retrain lock: %s",
                    _brief(error),
                    exc_info=_unexpected(error),
                )
                continue
            if not held:
                self._say(
                    logging.WARNING, "the retrain lock lapsed during the fit: its version will not be stored"
                )
                return

    def release(self) -> None:
        """Give the retrain lock back if this replica holds it (after a fit, and at shutdown: a
        replica stopped mid-retrain must not block every other's for the lock's life)."""
        token, self._token = self._token, None
        if token is not None:
            try:
                self._release(keys=[self._lock_key], args=[token])
            except Exception as error:  # Redis down: the lock expires by itself, or at our next attempt
                self._unreleased = token
                self._say(
                    logging.WARNING,
                    "could not release the retrain lock (it lapses by itself): %s",
                    _brief(error),
                    exc_info=_unexpected(error),
                )

    def release_at_stop(self) -> None:
        """``release`` at the stop (``Startup.halt``), unless a retrain is past its fence, storing its
        version: it gives the lock back itself once stored (abandoned, the lock lapses by its TTL),
        and one released under it had its complete version taken back by its last fence (review52d)."""
        with self._said:  # after the halt: a retrain not storing now never passes its fence
            storing = self._storing
        if not storing:
            self.release()

    def _release_leftover(self) -> None:
        """Give back a lock whose release failed. A Redis restarted from its AOF keeps the lock for
        its whole TTL, and this replica's next boundary would find its own lock and skip the retrain
        as "running in another replica"."""
        token, self._unreleased = self._unreleased, None
        if token is not None:
            self._release(keys=[self._lock_key], args=[token])

    def after_step(self, step: int) -> bool:
        """Start a background retrain if ``step`` is a configured boundary; True if one started."""
        if self._every <= 0 or self.running or self._halted.is_set():
            return False
        self._release_leftover()  # this replica's own lock, left by a failed release, is no fit running
        if self.running_anywhere():
            return False  # a boundary met while a fit runs is claimed by the next step after it
        if not self._claims_boundary(step):
            return False
        # its lines carry the schedule id of the step that started it, and nothing else of the request's
        # context: no deadline of the caller's, nor the stop's clock (``logs.schedule_only_context``)
        self.background = threading.Thread(
            target=schedule_only_context().run,
            args=(self._background, step),
            name=f"retrain-step-{step}",
            daemon=True,
        )
        self.background.start()
        return True

    def _claims_boundary(self, step: int) -> bool:
        """Whether ``step`` is at least ``every_steps`` past the last retrained step and this replica
        moved the shared mark (``keys.retrain_step``) to it first. The first step seen only sets the
        mark, and a step below it (a training run started over) moves it back: neither retrains."""
        last = self._redis.get(self.step_key)
        if last is None:
            self._redis.set(self.step_key, step)  # the first step seen: nothing earlier to learn from
            return False
        if step < int(last):  # a new training run started over: count from here
            self._advance(keys=[self.step_key], args=[last, step])
            return False
        if step - int(last) < self._every:
            return False
        return bool(self._advance(keys=[self.step_key], args=[last, step]))  # False: another replica first

    def _background(self, step: int) -> None:
        try:
            self.retrain_now("step", step)  # the steps before ``step`` are complete
        except ConflictError as error:
            self._say(logging.INFO, "automatic retrain skipped: %s", error.detail)
        except Exception:
            return  # counted and logged ("retrain failed", "retrain stopped") by retrain_now


def _failure(trigger: str, error: Exception) -> tuple[str, bool]:
    """What the one ``retrain failed`` line says: its reason (the store's path where the store
    failed), and whether it keeps the traceback.

    A store or Redis fault is the line alone: expected in operation, and what to fix is in the
    reason. Anything else is a bug, and keeps its traceback where nothing else logs one: a failed
    automatic retrain (a request's 500 is logged by the server, traceback and all)."""
    expected = isinstance(error, (ServiceError, *REDIS_FAILED))
    reason = error.detail if isinstance(error, ServiceError) else _brief(error)
    return reason, not expected and trigger != "request"


def _brief(error: Exception) -> str:
    """The error as one line: its type and message."""
    return f"{type(error).__name__}: {error}"


def _unexpected(error: Exception) -> bool:
    """Whether a failure to keep or give back the lock deserves a traceback. A Redis error does not:
    an outage is an expected event there (the lock lapses by itself), and the client's internals,
    40 lines a failure, only buried the one thing an operator needs, which error it was. Anything
    else is a bug, and keeps its traceback."""
    return not isinstance(error, REDIS_FAILED)

"""The serving predictor: history synced from the actuals stream, the model hot-reloaded from the store.

``predictors.predictor.LengthPredictor`` holds the history of actual lengths and, optionally, a fitted
model; it answers from fallbacks when either is missing, so the service is ready with an empty store.
Redis is the source of truth for history: before each prediction we fold in actuals appended since the last
sync (one ``XRANGE``; any replica may have received them), so every replica predicts from the same
history: exactly the newest ``Settings.actuals_maxlen`` reports, whether it followed the stream from
the start or loaded it afresh (the stream itself may hold a node more, ``XADD MAXLEN ~``). The
model store on disk is versioned; a version trained here or by another replica is picked up by
``reload`` and swapped in atomically by the predictor, so a request in flight finishes on the model
it started with and no request waits for a retrain. Where the follower runs (``followed``:
``service.learning.follower``), it folds other replicas' actuals and reloads off the request path,
and a request waits out neither: it predicts from the history last folded (after ``FOLD_WAIT_S`` at
most) and the model last loaded.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from predictors import cutoff
from predictors.history import History
from predictors.model import complete_steps, fit
from predictors.predictor import LengthPredictor, Predictions
from predictors.queries import Query, QueryBatch
from predictors.store import ModelStore, RetiredFeaturesError
from scheduler.errors import InvalidInputError
from service.delivery.views import DeliveryViews
from service.learning import store_calls
from service.learning.actuals import ActualsLog
from service.learning.folds_beside import FoldsBeside
from service.learning.heap import release_freed_heap
from service.learning.step_over import LastStep, StepReports, over

_log = logging.getLogger("service.models")
RELOAD_EVERY_S = 1.0  # how often a request checks the store for a version another replica wrote
# (unfollowed replicas, and the status routes; the follower as often, on its own clock)
# ``warm_later`` waits this long before warming, so a burst of report batches (workers reporting as
# their trajectories finish) costs one fold, not one per batch
WARM_AFTER_S = 0.2
# How long a request waits for the follower's fold under way before it predicts from the history last
# folded: a trickle's fold (a batch of reports, milliseconds) is still waited for, so the request reads
# the actuals stored before it as it did; a step's (32,768: 0.8-2.4 s, periodic50) is not
FOLD_WAIT_S = 0.05


def version_name(version: int | None) -> str:
    """How the service names a model version: ``v<N>`` for store version N, ``fallback`` for none."""
    return "fallback" if version is None else f"v{version}"


class Retrained(NamedTuple):
    """What ``ModelService.retrain`` stored."""

    version: int  # the store's number for it
    rows: int  # history rows the fit read (its snapshot, not the history held afterwards)
    seconds: float  # sync, fit, save and swap


class ModelService:
    """One predictor per app; thread-safe (requests run on a thread pool)."""

    def __init__(
        self, store: ModelStore, actuals: ActualsLog, keep: int = 20, delivery: DeliveryViews | None = None
    ) -> None:
        self.store = store
        self.actuals = actuals
        # the schedules' keys, read to tell whether the history's last step is over
        # (``service.learning.step_over``); None: it never is, until a later step is planned
        self.delivery = delivery
        self._reports = StepReports()  # the newest step's actuals by schedule (under ``_sync_lock``)
        self.keep = keep  # versions left in the store after a retrain
        self.predictor = LengthPredictor(History(max_rows=actuals.maxlen))  # the stream's newest maxlen
        self._cursor = "0-0"  # last actuals-stream id folded into the history
        self._newest_step: int | None = None  # the newest step folded (``StepReports.step``)
        # re-entrant: a request takes it, waiting a bounded while for the follower's fold or not at all
        # (``_sync_unless_followed``), then ``sync`` takes it again
        self._sync_lock = threading.RLock()
        self._beside = FoldsBeside()  # syncs beside requests: follower, POST /actuals, GET /models, retrain
        self.followed = False  # a follower runs (``service.learning.follower``): requests leave it the reload
        # One swap at a time: a reload lists the store, then swaps in its newest version unless held;
        # listed just before a retrain saved, it put the older version back over the one the retrain
        # had just swapped in (and answered), until the next reload
        self._swap_lock = threading.Lock()
        self._checked_at = 0.0
        self._warm_lock = threading.Lock()
        self._warm_step: int | None = None  # the step to warm next; None: none asked since the last
        self._warming = False  # a warm thread runs (and will take ``_warm_step``)
        self.warmer: threading.Thread | None = None  # the last warm thread started, if any
        self._unreadable: set[object] = set()  # stored versions that did not load (each logged once)
        self._retired_told = False  # a version fitted on features now refused was met (and logged)
        self.load_failed: Callable[[bool], None] | None = None  # told each failed load (True: the listing)
        self._planned: int | None = None  # the step this replica planned last (``predict``): open
        self.loaded = False

    @property
    def version(self) -> str:
        """``v<N>`` for store version N, ``fallback`` when no model is loaded."""
        return version_name(self.predictor.model_version)

    @property
    def synthetic(self) -> bool:
        """Whether the serving version was fitted on a synthetic trace (its metadata says so): its
        predictions then learned the generator's lengths, not a recorded run's."""
        model = self.predictor.model
        return model is not None and model.metadata.synthetic

    def start(self) -> None:
        """Load the latest stored model (if any) and the history, then fold it for the step after the
        newest loaded (``warm``); the app is ready afterwards. Not warmed, that step's first predict
        folded the whole history on the request's path (~0.2 s at 1.2 M rows, refresh49); warmed on
        a thread, a request arriving meanwhile folded beside it, twice as slow; at start it adds
        that ~0.2 s to the load's ~20 s."""
        self._reload()
        self.sync()
        if self._newest_step is not None:
            self.warm(self._newest_step + 1)
        self.loaded = True
        _log.info("predictor ready", extra={"model_version": self.version, "history_rows": self.rows})

    @property
    def rows(self) -> int:
        """History rows held."""
        return len(self.predictor.history)

    def sync(self) -> int:
        """Fold actuals appended since the last sync into the history; returns how many.

        When the stream no longer holds what was folded before (Redis restarted without its data,
        was flushed, or failed over to a replica behind), the history is replaced by what the
        stream holds: predictions, retrains and ``GET /models`` ``history_rows`` then read what
        Redis holds, as a replica started now would, not rows Redis lost."""
        with self._sync_lock:
            folded = self.actuals.rows_after(self._cursor)
            if folded.restarted:  # Redis lost what we held: hold what it holds, as a fresh replica
                _log.warning(
                    "actuals stream lost the history held; reloaded it from Redis",
                    extra={"history_rows_before": self.rows, "history_rows": len(folded.rows)},
                )
                self.predictor.use_history(History(folded.rows, max_rows=self.actuals.maxlen))
            elif len(folded.rows):
                self.predictor.observe(folded.rows)
            self._reports.fold(folded.rows, folded.schedules, folded.restarted)
            self._newest_step = self._reports.step
            self._cursor = folded.cursor
            return len(folded.rows)

    def follow(self) -> int:
        """Where the stream's newest entry is not the last folded, ``sync`` and warm the step after
        the newest folded (``warm_later``); the actuals folded. What the follower runs off the
        request path (``service.learning.follower``): one short read when nothing arrived."""
        if self.actuals.newest_id() == self._cursor:
            return 0
        with self._beside.counted():
            folded = self.sync()
        newest = self._newest_step
        if folded and newest is not None:
            self.warm_later(newest + 1)
        return folded

    def sync_stored(self) -> int:
        """``sync`` after ``POST /actuals`` stored a batch, for ``GET /models`` (``refresh``) or a retrain;
        where a follower runs, a request beside it waits for it ``FOLD_WAIT_S`` at most (``folds_beside``)."""
        if not self.followed:  # ``ROLLOUT_ACTUALS_FOLLOW_S=0``: no follower folds, so each caller does
            return self.sync()
        with self._beside.counted():
            return self.sync()

    def predict(self, queries: QueryBatch | Sequence[Query], step: int, quantile: float) -> Predictions:
        """Lengths at ``quantile`` from the freshest history and model version.

        Under a caller's check (``predictors.cutoff``) the fold and the model's chunks are cut at its
        deadline, and a fold cut short is finished by ``warm_later``. The sync and reload are not cut: a
        fold of new actuals moves the stream's cursor and the history together (cut between, rows would
        be lost or folded twice), and a version due to be loaded is what the request should predict with
        (docs/experiments.md, deadline49). Where a follower runs, this request neither waits out its
        fold under way (``_sync_unless_followed``) nor reloads: the follower does (periodic50)."""
        self._sync_unless_followed()
        if not self.followed:
            self.reload_if_due()
        self._planned = step  # one assignment: atomic; concurrent plans are of one step
        try:
            return self.predictor.predict(queries, step, quantile)
        except Exception:
            if cutoff.is_set():  # cut at the caller's deadline, maybe in the history's fold: finish
                self.warm_later(step)  # it off the request path, or every short deadline starts it anew
            raise

    def _sync_unless_followed(self) -> int:
        """``sync``, unless the follower's, ``POST /actuals``'s (``sync_stored``) or a retrain's is under
        way and outlasts ``FOLD_WAIT_S``: then nothing. The request predicts from the history last folded
        (whole: the fold's rows are one chunk, appended under the history's lock, where a predict takes
        its list of chunks) and the fold's rows are in the next request's. It waited the fold out: a
        step's 32,768 actuals held it 0.8-2.4 s (docs/experiments.md, periodic50; review50b). Not waited
        for either where it holds reports stored before the request: in the client's loop it missed a
        step's last 3-24% once in 12-15 steps, 0.1-1.0% worse predictions of recurring prompts, where
        waiting held the request 68-660 ms (learn51). Another request's sync is still waited for. No
        wait outlasts the caller's deadline (``FoldsBeside.wait_s``): it answers its 504 then (review51a)."""
        taken = self._sync_lock.acquire(blocking=False) or self._sync_lock.acquire(
            timeout=self._beside.wait_s(FOLD_WAIT_S)  # read once the lock is found held
        )
        if not taken:
            cutoff.check()  # the wait ended at the caller's deadline: its 504 now, not a predict
            return 0
        try:
            return self.sync()
        finally:
            self._sync_lock.release()

    def warm(self, step: int) -> None:
        """Fold the history held now into what ``predict`` of ``step`` reads (``LengthPredictor.warm``)."""
        started = time.perf_counter()
        self.predictor.warm(step)
        _log.debug("warmed", extra={"step": step, "ms": round((time.perf_counter() - started) * 1000.0, 1)})

    def warm_later(self, step: int) -> None:
        """``warm(step)`` on a background thread, after ``WARM_AFTER_S``: called once actuals are
        folded in, so the next step's ``/schedule`` on this replica finds its fold cached instead of
        doing it (~100 ms at 1M rows) on its own path. One thread at a time: asks made while it runs
        are coalesced into one more warm, of the latest step asked."""
        with self._warm_lock:
            self._warm_step = step if self._warm_step is None else max(step, self._warm_step)
            if self._warming:
                return
            self._warming = True
            self.warmer = threading.Thread(target=self._warm_asked, name="history-warm", daemon=True)
            self.warmer.start()

    def _warm_asked(self) -> None:
        """Warm the step last asked, until none is asked meanwhile; a failure is logged, never raised:
        the next ``predict`` folds what a warm left undone."""
        while True:
            time.sleep(WARM_AFTER_S)
            with self._warm_lock:
                step, self._warm_step = self._warm_step, None
                if step is None:
                    self._warming = False
                    return
            try:
                self.warm(step)
            except Exception:  # a thread's error reaches no caller: say it, the next predict folds
                _log.exception("warming the history for step %d failed; its first predict folds", step)

    def refresh(self) -> None:
        """Fold in new actuals, then ``reload_if_due``: what ``GET /models`` reports (a status route, not a
        plan's path: it waits for a fold under way and loads a version due, to say what serves)."""
        self.sync_stored()  # a step's fold here held a request beside it as POST /actuals' did (learn51)
        self.reload_if_due()

    def reload_if_due(self) -> None:
        """At most every ``RELOAD_EVERY_S``, load a version another replica stored (from the store,
        not Redis): also before saying which version serves (``GET /models``, ``/readyz``), so a
        replica that plans nothing does not report a version it would no longer use."""
        now = time.monotonic()
        if now - self._checked_at >= RELOAD_EVERY_S:
            self._checked_at = now
            self.reload()

    def reload(self) -> bool:
        """Swap in a version another replica stored, if any (``_reload``); whether it swapped. What the
        follower runs at each tick, off the request path."""
        if not self._reload():
            return False
        release_freed_heap()  # the boosters swapped out
        _log.info("hot-reloaded model", extra={"model_version": self.version})
        return True

    def _reload(self) -> bool:
        """Swap in the store's newest version that loads (``LengthPredictor.reload``); one that does
        not is logged once, where it had failed every request of every replica until removed."""
        with self._swap_lock:
            return self.predictor.reload(self.store, self._unreadable_version)

    def _unreadable_version(self, error: InvalidInputError) -> None:
        if isinstance(error, RetiredFeaturesError):  # not damage: no failed load to count or remove
            self._retired_version(error)
            return
        if self.load_failed is not None:  # every try counted (``rollout_model_load_failures_total``)
            self.load_failed(error.value == str(self.store.root))  # the store itself: its listing
        if error.value not in self._unreadable:
            self._unreadable.add(error.value)
            _log.error("model store: %s; passed over", error)

    def _retired_version(self, error: RetiredFeaturesError) -> None:
        """Say once in the replica's life, as a warning, why the store's newest versions are passed over:
        fitted before the upgrade on features no request may send (``predictors.featurenames``), each is
        left until a retrain stores one without them. Older versions so fitted add no line of their own
        (up to ``keep`` of them, all of one cause), and none is counted as a failed load: nothing is
        damaged, and the alert on those says to remove or re-copy the version."""
        if self._retired_told:
            return
        self._retired_told = True
        _log.warning(
            "model store: %s; it and any older version so fitted are passed over: an older version that "
            "loads, else the fallbacks, predicts until a retrain (POST /models/retrain, or the automatic one "
            "of ROLLOUT_RETRAIN_EVERY_STEPS) stores one fitted without them",
            error,
        )

    def retrain(
        self,
        fence: Callable[[], None] | None = None,
        fence_token: int | None = None,
        planned_step: int | None = None,
    ) -> Retrained:
        """Fit on the history's complete steps, store a new version, swap it in.

        A step is complete once a later one is planned (``planned_step``, the step whose first
        ``POST /schedule`` started an automatic retrain, else the step this replica planned last):
        the actuals of the step being planned, or of a later one the history holds, may still be
        arriving, its first finishers, the short ones, and a fit on them learned the step short
        (``predictors.model.complete_steps``). A retrain asked for (no ``planned_step``) also fits
        the history's last step where its schedules (those its actuals name and those its set lists)
        say it is over: each trajectory reported, but those that left nothing to report
        (``service.learning.step_over``); else it is left out, as a step run outside the delivery
        is. Where no step was planned here (actuals pushed from a trace, a restarted replica)
        every row is fitted, but a last step whose actuals name a schedule and is not over.

        ``fence`` runs just before the version is stored, the swap lock held, and raises to leave the
        fit unpublished: the retrain lock it was started under lapsed meanwhile
        (``service.learning.retrain``), and another replica may have fitted on newer actuals and
        stored its version already. It runs again once the version is in place, which is taken back
        if it raises then: the lock lapsed between the check and the rename, and the version's
        ``fence_token`` (stored with it) already has every reader pass it over, as superseded by the
        other replica's. The rows
        counted are those of the fit's own snapshot of the history: actuals folded in while it ran
        are not in the model, and counting them made ``history_rows`` name rows it never saw."""
        started = time.perf_counter()
        self.sync_stored()  # waited ``FOLD_WAIT_S`` at most where followed, out where not (review51a)
        # One snapshot of both, under the lock every fold takes: a step's first actuals folded between
        # the two made the history's newest step not the reports', and a step in flight was fitted whole
        with self._sync_lock:
            last = self._reports.last()
            held = self.predictor.history.held()  # actuals landing meanwhile are not fitted
        history = held()  # joined outside the locks: requests waited out the join at 1.2 M rows (learn51)
        if len(history) == 0:
            raise InvalidInputError("history", 0, "no actuals have been reported yet")
        history = complete_steps(history, self._open_step(history.step, planned_step, last))
        model = fit(history)
        with self._swap_lock:  # not while fitting: requests reload meanwhile
            if fence is not None:
                fence()
            version = store_calls.saved(self.store, model, fence_token)
            if fence is not None:
                store_calls.kept_if_fenced(self.store, version, fence)
            self.predictor.use_model(model, version, self.store.stamp(version))
        store_calls.pruned(self.store, self.keep)
        release_freed_heap()  # the fit's native buffers and the old boosters, freed by now
        took = time.perf_counter() - started
        _log.info("retrained", extra={"model_version": f"v{version}", "rows": len(history), "seconds": took})
        return Retrained(version, len(history), took)

    def _open_step(self, steps: np.ndarray, planned_step: int | None, last: LastStep) -> int | None:
        """The first step whose actuals may still be arriving: the step planned (``planned_step``, else
        this replica's last), or the history's last step where that is later (another replica
        planned it), unless, asked for, that last step is over (``step_over.over``); None where
        nothing is open. Where nothing was planned here (a restarted replica, or one another replica
        plans beside), the last step is open where its actuals name a schedule and it is not over:
        taking every step for complete fitted a step in flight's first finishers; a history naming
        no schedule (``trace push``) is still fitted whole."""
        planned = self._planned if planned_step is None else planned_step
        newest = int(steps.max())
        if planned is None:
            named = last.step == newest and bool(last.covered)
            return newest if named and not self._over(last, newest) else None
        if planned_step is None and planned <= newest and self._over(last, newest):
            return None
        return max(planned, newest)

    def _over(self, last: LastStep, step: int) -> bool:
        """``step_over.over`` where this service reads the delivery's keys; False where it does not."""
        return self.delivery is not None and over(last, step, self.delivery)

    def highest_fence_token(self) -> int:
        """The highest fencing token in the store; 503 naming the store where it cannot be listed."""
        return store_calls.highest_fence_token(self.store)

    def stored_versions(self) -> list[int]:
        """The store's complete versions; 503 naming the store where it cannot be listed."""
        return store_calls.stored_versions(self.store)

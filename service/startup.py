"""The app's start-up: build the request context and start the reaper, without holding off liveness.

``build_context`` connects and loads what a request needs; it tolerates a single-node Redis being
down (that client connects on first use: the app starts not-ready and recovers by itself). A Redis
Cluster client cannot be built at all until a node answers with the slot map. ``Startup`` then
lets the app serve anyway, ``/healthz`` 200, ``/readyz`` and every route that needs the context 503
(``service.context.context_of``), and builds it from a thread, one try every ``interval_s``, until
the cluster answers. Waiting before uvicorn started instead left the liveness probe unanswered for
the whole outage: a cluster down at pod start outlived the startup probe's 2 minutes and the pod
was restarted in a loop (CrashLoopBackOff, up to 5 minutes between tries once the cluster was back).
A Redis that answers with a version older than ``redis_conn.MIN_REDIS_VERSION`` ends the tries: the
app serves not-ready, ``state.starting`` holding the one-line refusal, until Redis is upgraded and
the app restarted (waiting will not fix it).
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

import anyio

from predictors.store import ModelStore
from service.context import PLAN_QUEUE_THREADS, Context
from service.delivery import Delivery
from service.delivery.errors import REDIS_FAILED, UnknownScheduleError
from service.delivery.reaper import Reaper
from service.learning.actuals import ActualsLog
from service.learning.follower import Follower
from service.learning.models import ModelService
from service.learning.retrain import Retrainer
from service.limits import PlanSlots
from service.metrics import Metrics
from service.redis_conn import RedisTooOldError, VersionCheck, connect, describe, refused
from service.settings import Settings
from service.speeds.learner import SpeedLearner

_log = logging.getLogger("service.app")
MAX_WATCHED_SCHEDULES = 32  # queue-depth metrics cover at most this many active schedules
RETRY_S = 2.0  # between tries to reach a Redis Cluster that has not answered yet


class Startup:
    """Puts the context on ``state`` (``state.context``, None until then; ``state.starting``, why
    not yet) and starts the reaper and the actuals follower: at once when it can, else from a thread;
    ``stop`` undoes both."""

    def __init__(self, settings: Settings, metrics: Metrics, state: Any, interval_s: float = RETRY_S) -> None:
        self.settings = settings
        self.metrics = metrics
        self.state = state  # the app's ``app.state``
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._lock = threading.Lock()  # a build that ends as the app stops is closed, not published
        self._thread: threading.Thread | None = None
        self._reaper: Reaper | None = None
        self._follower: Follower | None = None  # folds other replicas' actuals (``learning.follower``)
        self._release: threading.Thread | None = None  # the retrain lock's, started by ``halt``

    def begin(self) -> None:
        """Build now; if the cluster does not answer, serve not-ready and keep trying in a thread."""
        self.state.context = None
        self.state.starting = "connecting to Redis"
        self.state.too_old = None  # the refusal of a Redis too old, once found (every route says it)
        self.state.stopping = self._stop  # set by ``halt``: a plan still running gives up (``api.stopping``)
        if not self._attempt():
            self._thread = threading.Thread(target=self._retry, name="redis-cluster-wait", daemon=True)
            self._thread.start()

    def _retry(self) -> None:
        while not self._stop.wait(self.interval_s):
            if self._attempt():
                return

    def _attempt(self) -> bool:
        """One try; True once built (or no longer wanted), False while the cluster does not answer."""
        try:
            ctx = build_context(self.settings, self.metrics)
        except RedisTooOldError as error:  # logged by the check; only an upgrade and a restart fix it
            self.state.starting = f"refused: {error}"
            self.state.too_old = str(error)
            return True
        except REDIS_FAILED as error:
            where = describe(self.settings.redis_url or "")
            if refused(error):  # waiting alone will not fix credentials: say so loudly, keep trying
                self.state.starting = f"refused: {error}"
                _log.error("Redis Cluster at %s refused the service's user (%s); fix REDIS_URL", where, error)
            else:
                self.state.starting = f"unreachable: {error}"
                _log.warning(
                    "Redis Cluster at %s unreachable (%s); serving not-ready, next try in %.0f s",
                    where,
                    error,
                    self.interval_s,
                )
            return False
        with self._lock:
            if self._stop.is_set():
                ctx.redis.close()
                return True
            gc.collect()
            gc.freeze()  # long-lived startup objects leave the GC's scans: shorter pauses per request
            version = ctx.redis_version  # unchecked when Redis was down: no pass before it is new enough
            self._reaper = Reaper(
                ctx.delivery, on_reap=self.metrics.count_reaped, ready=lambda: version.check() is None
            ).start()
            if self.settings.actuals_follow_s > 0:  # other replicas' actuals, off the request path
                self._follower = Follower(ctx.models, self.settings.actuals_follow_s).start()
            self.state.context = ctx
            self.state.starting = None
        _log.info("service started", extra={"redis": describe(self.settings.redis_url or "")})
        return True

    def halt(self) -> None:
        """Stop taking work: no try at the cluster and no reaper pass after the current ones, and a plan
        still running gives up at its next check (``state.stopping``: ``service/api/stopping.py``), and a
        request waiting for a plan slot is refused (``PlanSlots.stop``). A retrain under way gives up at
        its next check and none starts (``Retrainer.halt``), and the retrain lock's release starts, on
        a thread (a stalled Redis times it out three times), so a retrain cut short by the shutdown
        does not hold the lock; idempotent."""
        with self._lock:
            self._stop.set()
            ctx: Context | None = self.state.context
            started = self._release is not None
            if ctx is not None and not started:
                self._release = threading.Thread(
                    target=ctx.retrainer.release_at_stop, name="retrain-lock-release", daemon=True
                )
        if self._reaper is not None:
            self._reaper.halt()
        if self._follower is not None:
            self._follower.halt()
        if ctx is not None:
            ctx.retrainer.halt()  # before the lock's release: the fit gives up, not on a lapsed lock
            ctx.plan_slots.stop()  # the requests waiting in line are refused now (503), not at a slot
        if self._release is not None and not started:
            self._release.start()

    def stop(self, timeout_s: float = 5.0, in_use: bool = False) -> bool:
        """Stop taking work (``halt``), wait for what is under way until ``timeout_s`` from now (a try
        at the cluster, the reaper's pass, the lock's release, a retrain), then close the Redis pool, unless
        something may still be on it: one of those, a planning thread, or ``in_use`` (threads the app
        cut); whether it closed it. A connection closed mid-reply raised redis-py's ``AttributeError``
        or ``Bad file descriptor`` in the thread reading it; a pool left open goes with the process,
        which is exiting. Idempotent."""
        self.halt()
        until = time.monotonic() + timeout_s
        with self._lock:
            ctx: Context | None = self.state.context
            reaper, self._reaper = self._reaper, None
            follower, self._follower = self._follower, None
        running = {
            "a try at the cluster": not _join(self._thread, until),
            "the retrain lock's release": not _join(self._release, until),
            "the reaper's pass": reaper is not None and not reaper.stop(max(0.0, until - time.monotonic())),
            "the actuals follower's fold": follower is not None
            and not follower.stop(max(0.0, until - time.monotonic())),
            "give-ups' take-backs": in_use,
        }
        if ctx is None:
            return True
        # a retrain's fit gives up within a boosting round; one past the window is abandoned, said once
        running["a retrain"] = not ctx.retrainer.stop(max(0.0, until - time.monotonic()))
        running["planning threads"] = ctx.plan_threads.statistics().borrowed_tokens > 0
        if any(running.values()):
            on_it = ", ".join(name for name, still in running.items() if still)
            _log.warning("Redis pool left open to the process's exit: %s still on it", on_it)
            return False
        ctx.redis.close()
        return True


def _join(thread: threading.Thread | None, until: float) -> bool:
    """Wait for ``thread`` (None: none started) until ``until``; whether it ended."""
    if thread is not None:
        thread.join(max(0.0, until - time.monotonic()))
    return thread is None or not thread.is_alive()


def build_context(settings: Settings, metrics: Metrics) -> Context:
    """Connect and load everything a request needs; tolerant of Redis being down right now.

    ``RedisTooOldError`` when Redis answers with a version the service cannot run on (its one-line
    reason logged); when it does not answer yet, ``/readyz`` checks once it does."""
    client, prefix = connect(settings), settings.key_prefix
    version = VersionCheck(client, settings.redis_url or "")
    try:
        refusal = version.check()
    except REDIS_FAILED:  # down (single node): checked by the first request that reaches it
        refusal = None
    if refusal is not None:
        client.close()
        raise RedisTooOldError(refusal)
    delivery = Delivery(client, prefix)
    log = ActualsLog(client, settings.actuals_maxlen, prefix)
    log.skipped = metrics.actuals_skipped.inc  # the start's read of the whole stream counted too
    model_service = ModelService(ModelStore(settings.model_dir), log, settings.model_keep, delivery)
    model_service.load_failed = metrics.count_load_failure  # the start's load counted too
    try:
        model_service.start()
    except REDIS_FAILED as error:
        model_service.loaded = True  # the fallbacks serve; history syncs on the first request
        if refused(error):  # waiting will not fix credentials: tell the operator
            _log.error(
                "Redis refused the service's user at startup (%s); check REDIS_URL's credentials", error
            )
        else:
            _log.warning("Redis unreachable at startup (%s); will retry on each request", error)
    metrics.watch_queues(lambda: _queue_depths(delivery))
    metrics.watch_model(lambda: _serving_version(model_service))
    return Context(
        settings=settings,
        redis=client,
        delivery=delivery,
        metrics=metrics,
        models=model_service,
        speeds=SpeedLearner(
            client, settings.speed_ewma_alpha, prefix, settings.retention_s, settings.default_engine
        ),
        actuals=log,
        retrainer=Retrainer(model_service, client, metrics, settings.retrain_every_steps, prefix),
        plan_slots=PlanSlots(settings.max_concurrent_plans, settings.plan_queue_timeout_s),
        redis_version=version,
        plan_threads=anyio.CapacityLimiter(settings.max_concurrent_plans + PLAN_QUEUE_THREADS),
    )


def _serving_version(predictor: ModelService) -> str:
    """The predictor version serving now, after picking up one another replica stored (as ``/readyz``
    and ``GET /models`` do): a replica that plans nothing must not report a version it dropped."""
    predictor.reload_if_due()
    return predictor.version


def _queue_depths(delivery: Delivery) -> Mapping[tuple[str, str], int]:
    """Counts by state of the newest active schedules (read when Prometheus scrapes)."""
    depths: dict[tuple[str, str], int] = {}
    for schedule_id in delivery.newest_schedules(MAX_WATCHED_SCHEDULES):
        try:
            totals = delivery.totals(schedule_id)
        except UnknownScheduleError:  # expired since it was indexed: the reaper will drop it
            continue
        for state, count in totals.items():
            depths[(schedule_id, state)] = count
    return depths

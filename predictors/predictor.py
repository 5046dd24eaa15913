"""The serving API: lengths for a batch of trajectories at a chosen quantile, with a safe answer always.

``LengthPredictor.predict(queries, step, quantile)`` answers every query from the best source that
applies: the LightGBM model for a prompt with history (when a model is loaded), else the prompt's own
history mean, else the global prior conditioned on prompt length (which, with no history at all,
is a stated share of the cap). It never fails for lack of a model or of data. Features read only
history of steps before ``step``; actuals that workers report go in through ``observe``. A new model
version is swapped in with ``use_model`` or ``reload`` (from a ``ModelStore``) between two calls.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from predictors.censored import raise_censored
from predictors.drift import prepare, projected, widened_p90
from predictors.fallbacks import GlobalPrior, PriorDefaults, pooled_log_sd, prompt_mean
from predictors.features import build_features, distinct_queries
from predictors.history import History
from predictors.model import FittedModel
from predictors.priorcounts import CACHE_CELLS
from predictors.promptprior import PriorRows, prior_at
from predictors.promptstats import PromptStats
from predictors.quantiles import PLANNING_QUANTILE, at_quantile, check_quantile, ordered
from predictors.queries import Query, QueryBatch
from predictors.store import ModelStore, RetiredFeaturesError, VersionGoneError
from predictors.tracetable import FloatArray, IntArray, Trace
from scheduler.errors import InvalidInputError
from scheduler.trace import TraceRow

SOURCES: tuple[str, ...] = ("lightgbm", "prompt_history_mean", "global_prior")
_LIGHTGBM, _HISTORY_MEAN, _GLOBAL_PRIOR = range(len(SOURCES))  # a query's source, as its index in SOURCES


# A cached global prior: (id of the history, step, its version_before), the prior, the pooled spread
_CachedPrior = tuple[tuple[int, int, int], GlobalPrior, float]
_PriorCache = tuple[_CachedPrior, ...]


@dataclass(frozen=True, eq=False)
class Predictions:
    """Per-query predicted lengths in tokens, each clipped to [1, max_new_tokens]."""

    quantile: float  # the quantile ``value`` was asked at
    p50: FloatArray  # median length
    p90: FloatArray  # 90th percentile (>= p50)
    value: FloatArray  # length at ``quantile``
    source: tuple[str, ...]  # which of SOURCES answered each query
    model_version: int | None  # store version of the model used, None if none was loaded

    def __len__(self) -> int:
        return len(self.value)


class LengthPredictor:
    """History + an optional fitted model, behind one ``predict`` call; safe to share across threads."""

    def __init__(
        self,
        history: History | None = None,
        model: FittedModel | None = None,
        model_version: int | None = None,
        defaults: PriorDefaults | None = None,
    ) -> None:
        self._history = history if history is not None else History()
        self._model = model
        self._version = model_version
        self._stamp = ""  # ModelStore.stamp of the version held, "" when none came from a store
        self._retired: dict[int, tuple[int, ...]] = {}  # version -> its ModelStore.identity when refused so
        self._defaults = defaults or PriorDefaults()
        self._lock = threading.Lock()
        # (id of the history, step, its version_before) -> prior and spread, the latest few steps
        self._global_prior_cache: _PriorCache = ()
        if model is not None:
            prepare()  # a model's predictions read the drift (``predictors.drift.prepare``)

    @property
    def history(self) -> History:
        """The observed actuals this predictor reads."""
        return self._history

    @property
    def model(self) -> FittedModel | None:
        """The model in use, if any."""
        return self._model

    @property
    def model_version(self) -> int | None:
        """Store version of the model in use (None: no model, or one not from a store)."""
        return self._version

    def observe(self, rows: Trace | Iterable[TraceRow]) -> None:
        """Record actual lengths (e.g. workers' completion reports); later steps' predictions use them."""
        self._history.append(rows)

    def use_history(self, history: History) -> None:
        """Read ``history`` from now on (the source it mirrors was lost and reloaded); calls already
        running finish with the one they started with."""
        with self._lock:
            self._history = history
            self._global_prior_cache = ()

    def use_model(self, model: FittedModel | None, version: int | None = None, stamp: str = "") -> None:
        """Swap the model atomically; calls already running finish with the one they started with.
        ``stamp`` is the store's (``ModelStore.stamp``), so ``reload`` knows the version it holds."""
        if model is not None:
            prepare()  # a model's predictions read the drift (``predictors.drift.prepare``)
        with self._lock:
            self._model, self._version, self._stamp = model, version, stamp

    def reload(
        self, store: ModelStore, unreadable: Callable[[InvalidInputError], None] | None = None
    ) -> bool:
        """Hot reload: hold the store's newest version that loads; True if that swapped the model.

        Newest, not newer than ours: removing the newest version rolls every replica back to the
        one before, and a version stored again under our number (its stamp differs) is taken. A
        version that does not load (damaged, foreign) is passed over and ``unreadable`` is told (not of
        one removed since the listing: ``VersionGoneError``): one
        bad folder must not stop every replica that reads the store, nor their start, and neither
        must a store that cannot be listed (a lost network volume): the model held stays. With no
        version left in the store, a model taken from it is dropped (the fallbacks answer), as a
        replica started now would: removing every version is how an operator withdraws a bad only
        model. (Versions present that do not load are not that: they may be unreadable only now.)
        Nor is the held version's folder reading damaged (a network volume's hiccup, an operator's
        copy half done): the model held is kept, as passing over it would roll the replica back to the
        version before, serving an older model until the folder read whole again. A version refused for
        features no request may send (``RetiredFeaturesError``) is told once and not read again while
        its ``metadata.json`` is the same file (``ModelStore.identity``): each tick had re-read it and
        re-listed the store to load it, 460 reads and 0.2 s a tick with 20 such versions (edges63)."""
        try:
            versions = store.versions()
        except OSError as error:
            if unreadable is not None:
                unreadable(InvalidInputError("model_store", str(store.root), f"cannot be listed ({error})"))
            return False
        self._retired = {v: seen for v, seen in self._retired.items() if v in versions}  # gone: forgotten
        for version in reversed(versions):
            if version in self._retired and store.identity(version) == self._retired[version]:
                if version == self._version:  # the held number refused: kept at every tick as at
                    return False  # the first, never passed over for the one before (review64)
                continue  # refused for its features, and not replaced since: not read again
            stamp = store.stamp(version)
            if (version, stamp) == (self._version, self._stamp):
                return False
            seen = store.identity(version)  # before the read: one replaced meanwhile is read again
            try:
                model = store.load(version)[1]
            except VersionGoneError:  # removed since the listing (a rollback): not unreadable, and
                continue  # not the listing failing, which its report had been taken for (review51a)
            except InvalidInputError as error:
                if isinstance(error, RetiredFeaturesError) and seen is not None:
                    self._retired[version] = seen
                if unreadable is not None:
                    unreadable(error)
                if version == self._version:
                    return False  # the held number does not read now: keep it, never roll back for that
                continue
            self.use_model(model, version, stamp)
            return True
        if versions or not self._stamp:  # some do not load now; or none held from a store: keep it
            return False
        self.use_model(None)
        return True

    def predict(
        self, queries: QueryBatch | Sequence[Query], step: int, quantile: float = PLANNING_QUANTILE
    ) -> Predictions:
        """Lengths for trajectories of training step ``step``, from history of steps before it only;
        ``value`` at ``quantile``, by default the median the service and the replay plan on."""
        check_quantile(quantile)
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0:
            raise InvalidInputError("step", step, "must be an integer >= 0")
        batch = queries if isinstance(queries, QueryBatch) else QueryBatch.of(queries)
        with self._lock:  # one model and one history throughout, should a swap land meanwhile
            model, version, history = self._model, self._version, self._history
        stats = history.stats_before(int(step))
        positions = stats.positions(batch.prompt_id)
        prior = prior_at(stats, positions)
        global_prior, sigma = self._global_prior_before(history, int(step))
        seen = prior.seen
        p50, p90 = global_prior.predict(batch.prompt_tokens, batch.max_new_tokens)
        source = np.full(len(batch), _GLOBAL_PRIOR, dtype=np.int8)
        if np.any(seen):
            m50, m90, answered_by = _seen_lengths(model, stats, batch, positions, prior, sigma, int(step))
            source[seen] = answered_by
            p50, p90 = p50.copy(), p90.copy()
            p50[seen], p90[seen] = m50, m90
            truncation = _last_step_truncation(stats, positions)
            p50, p90 = raise_censored(p50, p90, batch.max_new_tokens, *truncation)
        p50, p90 = ordered(p50, p90, batch.max_new_tokens)
        return Predictions(
            quantile=quantile,
            p50=p50,
            p90=p90,
            value=at_quantile(p50, p90, quantile, batch.max_new_tokens),
            source=tuple(map(SOURCES.__getitem__, source.tolist())),
            model_version=version,
        )

    def warm(self, step: int) -> None:
        """Compute now what ``predict(..., step)`` reads from history (the stats fold, the global
        prior), so that call finds them cached: the service warms the next step after its actuals
        arrive, while the trainer trains, off the ``/schedule`` path. Not the joined trace:
        ``predict`` reads the history's chunks unjoined, and joining them costs ~20 ms at 1 M rows
        after every append. Safe beside a concurrent ``predict``: both caches
        are keyed by the history's version, so the slower of two computing the same entry stores an
        equal value, and rows arriving meanwhile miss it."""
        history = self._history  # one history throughout, as in ``predict``
        history.stats_before(step)
        self._global_prior_before(history, step)

    def _global_prior_before(self, history: History, step: int) -> tuple[GlobalPrior, float]:
        """Global prior and pooled spread from ``history`` before ``step``, cached while it holds.

        The caller reads the history once and passes it: read here again, a ``use_history`` landing
        between the two reads gave a prediction the stats of one history and the prior of another."""
        key = (id(history), step, history.version_before(step))
        cached = self._global_prior_cache
        for held, prior, sigma in cached:
            if held == key:
                return prior, sigma
        found = self._resumed_prior(history, step, cached)
        if found is not None and history.version_before(step) != key[2]:
            found = None  # rows came meanwhile: the old counts and the new rows' may be of two moments
        if found is None:
            prompt_tokens, output_tokens = history.columns_before(step, "prompt_tokens", "output_tokens")
            found = GlobalPrior.of(prompt_tokens, output_tokens, self._defaults)
        sigma = pooled_log_sd(history.stats_before(step))
        lapsed = {held for held, _, _ in self._global_prior_cache if _lapsed(held, history)}
        with self._lock:  # the latest four steps asked about, as ``History.stats_before`` keeps
            kept = [e for e in self._global_prior_cache if e[0][:2] != key[:2] and e[0] not in lapsed]
            kept.append((key, found, sigma))
            self._global_prior_cache = _bounded(tuple(sorted(kept, key=lambda e: e[0][1])[-4:]))
        return found, sigma

    @staticmethod
    def _resumed_prior(history: History, step: int, cached: _PriorCache) -> GlobalPrior | None:
        """The prior before ``step`` from the cached one of the latest earlier step whose rows are still
        all held and none came since (its version holds), counting only the rows of the steps between
        (``GlobalPrior.advanced``, identical to the bit): the step's first predict after its
        actuals counted every row held (~17 ms of CPU at 1.2 M rows). None: count them all.

        The caller checks the version of ``step`` again after it: rows of a step before ``step``
        arriving while this reads would leave the sum of counts taken at two moments."""
        valid = [
            (held[1], prior)
            for held, prior, _ in cached
            if held[0] == id(history) and held[1] < step and held[2] == history.version_before(held[1])
        ]
        if not valid:
            return None
        since, base = max(valid, key=lambda e: e[0])
        prompt_tokens, output_tokens = history.columns_before(
            step, "prompt_tokens", "output_tokens", since=since
        )
        return base.advanced(prompt_tokens, output_tokens)


def _bounded(cache: _PriorCache) -> _PriorCache:
    """``cache`` (ascending steps) whose priors but the newest step's keep their counts only while all
    the counts kept hold ``CACHE_CELLS`` cells or fewer, the newest first: the newest step's are what
    the next step's first predict advances (``_resumed_prior``), an older one's only what an advance
    falls back on where rows of an earlier step came since (a late report). Four tables of lengths
    near ``COUNTED_MAX``, each worth keeping over 1.2 M rows, held 4 x ~10 MiB (edges61); now one,
    while a bench-like history's four (~33,000 cells each) are all kept. A prior without its counts
    answers the same; advancing from it is counting afresh."""
    budget = CACHE_CELLS
    kept: list[_CachedPrior] = []
    for index, (key, prior, sigma) in enumerate(reversed(cache)):
        counts = prior.counts
        if counts is not None and index and counts.cells > budget:
            prior = replace(prior, counts=None)
        elif counts is not None:
            budget -= counts.cells
        kept.append((key, prior, sigma))
    return tuple(reversed(kept))


def _lapsed(held: tuple[int, int, int], history: History) -> bool:
    """Whether a cached prior of ``history`` (its key ``held``) no longer holds: rows of a step before
    its step came since, and a version only ever rises, so neither a predict nor an advance can use
    it again. Kept till four newer steps pushed it out, a capped history's (every append trims, and
    so moves every step's version) held four priors of which only the newest was of use, each with
    its counts, up to ~9 MiB apiece (edges61)."""
    return held[0] == id(history) and held[2] != history.version_before(held[1])


def _seen_lengths(
    model: FittedModel | None,
    stats: PromptStats,
    batch: QueryBatch,
    positions: IntArray,
    prior: PriorRows,
    sigma: float,
    step: int,
) -> tuple[FloatArray, FloatArray, int]:
    """(p50, p90) of the queries whose prompt has history (``prior.seen``), and the source that
    answers them all: the model where one is loaded, else the prompt's history mean."""
    seen = prior.seen
    if model is not None:
        m50, m90 = _model_lengths(model, stats, batch, positions, np.flatnonzero(seen), step)
        return m50, m90, _LIGHTGBM
    h50, h90 = prompt_mean(prior, sigma)
    return h50[seen], h90[seen], _HISTORY_MEAN


def _model_lengths(
    model: FittedModel, stats: PromptStats, batch: QueryBatch, positions: IntArray, rows: IntArray, step: int
) -> tuple[FloatArray, FloatArray]:
    """The model's (p50, p90) for the queries at ``rows`` (prompts with history).

    Features are built once per distinct query: the n samples of a GRPO group share every input the
    model reads (the prompt's history, its length, cap and extra features), so a 32k-trajectory batch
    is ~4k feature rows. Building all 32k and merging equal rows afterwards spent more on the
    features and the row comparison than LightGBM spent scoring (``distinct_queries`` compares the
    few input columns instead)."""
    first, inverse = distinct_queries(batch, positions, rows, model.spec)
    picked = rows[first]
    prior = prior_at(stats, positions[picked])
    x = build_features(prior, batch.take(picked), step, stats.trend, model.spec)
    # the base moved by the drift over a gap longer than any fitted (predictors.drift)
    base, spread = projected(prior, stats, positions[picked], step, model.metadata.longest_gap)
    m50, m90 = model.predict(x, base)
    m90 = widened_p90(m50, m90, spread)
    return m50[inverse], m90[inverse]


def _last_step_truncation(stats: PromptStats, positions: IntArray) -> tuple[FloatArray, ...]:
    """Per query, of its prompt's last step: share truncated, largest cap and length they were cut at
    (0 where the prompt has no history): what ``raise_censored`` reads."""
    if len(stats.count) == 0:
        return tuple(np.zeros(len(positions)) for _ in range(3))
    ok = positions >= 0
    at = np.where(ok, positions, 0)
    share = stats.last_truncated[at] / np.maximum(stats.last_n[at], 1)
    return tuple(np.where(ok, c, 0.0) for c in (share, stats.last_trunc_cap[at], stats.last_trunc_len[at]))

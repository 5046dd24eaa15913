"""The observed rollouts and what they say about each prompt as of a given step.

``History`` is an append-only store of actual lengths (from a trace file, or from workers' reports as a
step runs). ``History.stats_before(step)`` folds every row of an earlier step, in step order, into
per-prompt aggregates (``PromptStats``): the only view of the past that features may read, which is
what makes "no leakage" a property of one function rather than of every caller. ``walk_steps``
yields the same aggregates for each step of a trace in turn, so training sees exactly what serving
will see.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from itertools import repeat
from typing import Any

import numpy as np

from predictors.tracetable import FloatArray, IntArray, ObjArray, Trace, empty_trace
from scheduler.trace import TraceRow

EWM_ALPHA = 0.5  # weight of the newest step in the exponentially weighted mean of step means
MAX_CHUNKS = 256  # appends kept apart before ``History`` concatenates them (many tiny report batches)
# Extra feature columns a ``History`` holds. Each is a dense column over EVERY row (the model's input),
# so distinct names cost rows x names: reports inventing fresh names (64 a report, by the API's rule)
# grew a replica by ~1 GB from 900 rows, and the stream keeps them, so every restart met them again.
MAX_EXTRA_COLUMNS = 64
_log = logging.getLogger("predictors.history")


@dataclass(frozen=True, eq=False)
class PromptStats:
    """Per-prompt aggregates of every row with ``step < before``; arrays are indexed by ``index[prompt]``."""

    before: int  # these stats summarise rows of steps strictly below this one
    index: Mapping[str, int]  # prompt id -> position in the arrays below
    count: IntArray  # samples seen, all earlier steps
    total: FloatArray  # sum of output tokens, all earlier steps
    truncated: IntArray  # samples that hit the cap, all earlier steps
    last_step: IntArray  # most recent step the prompt ran in
    last_n: IntArray  # samples in that step
    last_truncated: IntArray  # samples of that step that hit their cap
    last_trunc_cap: FloatArray  # largest cap one of them ran under (its length if unrecorded); 0: none
    last_trunc_len: FloatArray  # largest length one of them was cut at; 0: none
    last_mean: FloatArray  # mean output tokens in that step
    last_max: FloatArray  # max output tokens in that step
    last_std: FloatArray  # std (population) of output tokens in that step
    ewm_mean: FloatArray  # EWM of the per-step means, newest weighted EWM_ALPHA
    last_reward: FloatArray  # mean reward of the latest step that had rewards; NaN if none
    within_ss: FloatArray  # sum over steps of squared deviations of log length from the step's log mean
    within_df: IntArray  # degrees of freedom of within_ss (samples minus groups)
    step_ids: IntArray  # earlier steps, ascending
    step_means: FloatArray  # global mean output tokens of each of those steps

    @property
    def num_rows(self) -> int:
        """Rows summarised."""
        return int(self.count.sum())

    @property
    def trend(self) -> float:
        """Global drift of log mean length per step over the last two steps (0 with fewer than two)."""
        if len(self.step_ids) < 2:
            return 0.0
        gap = float(self.step_ids[-1] - self.step_ids[-2])
        newer, older = max(self.step_means[-1], 1.0), max(self.step_means[-2], 1.0)  # an all-empty step
        return float(np.log(newer / older) / gap)

    def positions(self, prompt_ids: Iterable[str]) -> IntArray:
        """Array position of each prompt, -1 where the prompt has no history."""
        ids = list(prompt_ids)
        return np.fromiter(map(self.index.get, ids, repeat(-1, len(ids))), dtype=np.int64, count=len(ids))


def factorize(values: ObjArray) -> tuple[IntArray, dict[str, int]]:
    """Integer codes for strings in first-seen order (a dict pass: faster than sorting objects)."""
    index: dict[str, int] = {}
    setdefault = index.setdefault
    codes = np.fromiter((setdefault(v, len(index)) for v in values), dtype=np.int64, count=len(values))
    return codes, index


def repeated_rows(trace: Trace, same_length: bool = False) -> np.ndarray:
    """True for each row whose (step, prompt_id, sample_idx) an earlier row already has (and, with
    ``same_length``, its output_tokens too): one trajectory reported twice.

    A repeat is its own "sibling" in leave-one-out features, so its length leaks into its own
    training example and the p90 calibration (coverage 0.895 -> 0.815 with one step doubled)."""
    codes, _ = factorize(trace.prompt_id)
    columns = [trace.step, codes, trace.sample_idx] + ([trace.output_tokens] if same_length else [])
    order = np.lexsort(columns[::-1])
    keys = np.stack([c[order] for c in columns], axis=1)
    repeat_of_previous = np.zeros(len(trace), dtype=bool)
    repeat_of_previous[1:] = np.all(keys[1:] == keys[:-1], axis=1)
    repeated = np.zeros(len(trace), dtype=bool)
    repeated[order] = repeat_of_previous  # lexsort is stable: the first of equal keys keeps its row
    return repeated


@dataclass(frozen=True, eq=False)
class StepGroups:
    """One row per (prompt, step) group of a trace, sorted by step: the unit the fold consumes."""

    prompt: IntArray  # prompt code of the group
    step: IntArray  # step of the group
    n: IntArray  # samples
    total: FloatArray  # sum of output tokens
    maximum: FloatArray  # max output tokens
    sumsq: FloatArray  # sum of squared output tokens
    log_sum: FloatArray  # sum of log output tokens (log of max(tokens, 1))
    log_sumsq: FloatArray  # sum of squared log output tokens
    truncated: IntArray  # samples at the cap
    trunc_cap: FloatArray  # largest cap of a truncated sample (its length where the cap is unknown); 0: none
    trunc_len: FloatArray  # largest length of a truncated sample; 0: none
    reward_sum: FloatArray  # sum of known rewards
    reward_n: IntArray  # known rewards
    row_group: IntArray  # for every trace row, its group number


def step_groups(trace: Trace, codes: IntArray) -> StepGroups:
    """Aggregate a trace by (prompt code, step) with bincounts (no Python loop over rows)."""
    width = int(codes.max()) + 1 if len(codes) else 1
    step_code, steps = _step_codes(trace.step, width)
    uniq, inverse = np.unique(step_code * width + codes, return_inverse=True)
    m = len(uniq)
    y = trace.output_tokens.astype(np.float64)
    logy = np.log(np.maximum(y, 1.0))
    n = np.bincount(inverse, minlength=m)
    maximum = np.full(m, -np.inf)
    np.maximum.at(maximum, inverse, y)
    known = ~np.isnan(trace.reward)
    cut = trace.truncated
    trunc_cap, trunc_len = np.zeros(m), np.zeros(m)
    np.maximum.at(trunc_cap, inverse[cut], np.where(trace.max_new_tokens > 0, trace.max_new_tokens, y)[cut])
    np.maximum.at(trunc_len, inverse[cut], y[cut])
    return StepGroups(
        prompt=uniq % width,
        step=uniq // width if steps is None else steps[uniq // width],
        n=n,
        total=_sums(inverse, y, minlength=m),
        maximum=maximum,
        sumsq=_sums(inverse, y * y, minlength=m),
        log_sum=_sums(inverse, logy, minlength=m),
        log_sumsq=_sums(inverse, logy * logy, minlength=m),
        truncated=_sums(inverse, cut, minlength=m).astype(np.int64),
        trunc_cap=trunc_cap,
        trunc_len=trunc_len,
        reward_sum=_sums(inverse, np.where(known, trace.reward, 0.0), minlength=m),
        reward_n=_sums(inverse, known, minlength=m).astype(np.int64),
        row_group=inverse.astype(np.int64),
    )


def _step_codes(step: IntArray, width: int) -> tuple[IntArray, IntArray | None]:
    """(code of each row's step, step of each code or None where codes are steps) such that
    ``code * width + prompt`` fits in an int64.

    The codes are the steps themselves (no extra sort) unless a step is so large that the key
    would overflow (steps numbered by timestamp, say): the groups of different prompts and steps
    then shared keys, and their lengths were silently mixed up. Then steps are numbered densely."""
    if len(step) == 0 or int(step.max()) < np.iinfo(np.int64).max // width:
        return step, None
    distinct, code = np.unique(step, return_inverse=True)
    return code.ravel().astype(np.int64), distinct


def _sums(groups: IntArray, weights: np.ndarray, minlength: int) -> FloatArray:
    """Per-group sums of ``weights`` as float64 (bincount's stub types it as int)."""
    return np.asarray(np.bincount(groups, weights=weights, minlength=minlength), dtype=np.float64)


class _Fold:
    """Mutable per-prompt state, advanced one step at a time; ``snapshot`` freezes it."""

    def __init__(self, index: dict[str, int]) -> None:
        p = len(index)
        self.index = index
        ints = ("count", "truncated", "last_n", "last_truncated", "within_df")
        self.ints = {k: np.zeros(p, dtype=np.int64) for k in ints}
        self.ints["last_step"] = np.full(p, -1, dtype=np.int64)
        names = (
            "total",
            "last_mean",
            "last_max",
            "last_std",
            "ewm_mean",
            "within_ss",
            "last_trunc_cap",
            "last_trunc_len",
        )
        self.floats = {k: np.zeros(p) for k in names}
        self.floats["last_reward"] = np.full(p, np.nan)
        self.step_ids: list[int] = []
        self.step_means: list[float] = []

    def advance(self, g: StepGroups, sel: slice, step: int) -> None:
        """Fold the groups ``g[sel]`` (all of one step) into the state."""
        p, n = g.prompt[sel], g.n[sel]
        mean = g.total[sel] / n
        f, i = self.floats, self.ints
        seen = i["last_step"][p] >= 0
        f["ewm_mean"][p] = np.where(seen, EWM_ALPHA * mean + (1 - EWM_ALPHA) * f["ewm_mean"][p], mean)
        f["total"][p] += g.total[sel]
        f["last_mean"][p] = mean
        f["last_max"][p] = g.maximum[sel]
        f["last_std"][p] = np.sqrt(np.maximum(g.sumsq[sel] / n - mean * mean, 0.0))
        f["within_ss"][p] += np.maximum(g.log_sumsq[sel] - g.log_sum[sel] ** 2 / n, 0.0)
        has_reward = g.reward_n[sel] > 0
        rewards = g.reward_sum[sel] / np.maximum(g.reward_n[sel], 1)
        f["last_reward"][p] = np.where(has_reward, rewards, f["last_reward"][p])
        i["count"][p] += n
        i["truncated"][p] += g.truncated[sel]
        i["last_truncated"][p] = g.truncated[sel]
        f["last_trunc_cap"][p] = g.trunc_cap[sel]
        f["last_trunc_len"][p] = g.trunc_len[sel]
        i["last_n"][p] = n
        i["within_df"][p] += n - 1
        i["last_step"][p] = step
        self.step_ids.append(step)
        self.step_means.append(float(g.total[sel].sum() / n.sum()))

    def snapshot(self, before: int) -> PromptStats:
        """An immutable copy of the state: the stats of every row before ``before``."""
        arrays: dict[str, Any] = {k: v.copy() for k, v in (*self.ints.items(), *self.floats.items())}
        return PromptStats(
            before=before,
            index=self.index,
            **arrays,
            step_ids=np.asarray(self.step_ids, dtype=np.int64),
            step_means=np.asarray(self.step_means),
        )


def _kept(row: TraceRow, columns: Mapping[str, None]) -> TraceRow:
    """``row`` with only the features named in ``columns``."""
    if all(name in columns for name in row.features):
        return row
    return replace(row, features={k: v for k, v in row.features.items() if k in columns})


def walk_steps(trace: Trace) -> Iterator[tuple[int, PromptStats, IntArray, StepGroups]]:
    """For each step, ascending: (step, stats of all earlier steps, row indices of the step, the groups).

    Training builds its examples from these triples, serving from ``History.stats_before``; both are
    the same fold, so a feature cannot see its own step in one and not the other.
    """
    codes, index = factorize(trace.prompt_id)
    groups = step_groups(trace, codes)
    fold = _Fold(index)
    bounds = np.flatnonzero(np.diff(groups.step)) + 1
    starts = np.concatenate([[0], bounds]).astype(int)
    ends = np.concatenate([bounds, [len(groups.step)]]).astype(int)
    row_order = np.argsort(groups.row_group, kind="stable")
    row_bounds = np.searchsorted(groups.row_group[row_order], starts)
    row_ends = np.searchsorted(groups.row_group[row_order], ends)
    for start, end, r0, r1 in zip(starts, ends, row_bounds, row_ends, strict=True):
        step = int(groups.step[start])
        yield step, fold.snapshot(step), row_order[r0:r1], groups
        fold.advance(groups, slice(start, end), step)


def stats_of(trace: Trace, before: int) -> PromptStats:
    """The per-prompt stats of the rows of ``trace`` with step < ``before``."""
    past = trace.take(trace.step < before)
    codes, index = factorize(past.prompt_id)
    fold = _Fold(index)
    if len(past):
        groups = step_groups(past, codes)
        bounds = np.concatenate([[0], np.flatnonzero(np.diff(groups.step)) + 1, [len(groups.step)]])
        for start, end in itertools.pairwise(bounds.tolist()):
            fold.advance(groups, slice(int(start), int(end)), int(groups.step[start]))
    return fold.snapshot(before)


class History:
    """Actual lengths in arrival order; thread-safe so workers' reports can land while predictions are
    served.

    Cached per-step stats stay valid while new rows belong to that step or later ones: actuals of
    step s streaming in do not force a re-fold for predictions of step s (only for step s + 1).
    With ``max_rows`` exactly the newest ``max_rows`` rows are kept, as the capped actuals stream
    keeps them: a long-running service would otherwise hold, and retrain on, every row it ever saw,
    and a replica that loads the stream afresh must hold the same rows as one that has followed it
    for weeks (the stream's ``MAXLEN ~`` keeps anything from the cap to a node more; trimming "a
    tenth over" left a restarted replica with 518 rows where its peers held 500, predicting
    differently).
    """

    def __init__(self, rows: Trace | Iterable[TraceRow] | None = None, max_rows: int | None = None) -> None:
        trace = rows if isinstance(rows, Trace) or rows is None else Trace.from_rows(rows)
        self.max_rows = max_rows  # None: keep everything
        self._chunks: list[Trace] = []
        self._lock = threading.Lock()
        self._appends: Counter[int] = Counter()  # earliest step of each append -> how many appends
        self._stats: dict[int, tuple[int, PromptStats]] = {}  # before -> (version_before, stats)
        self._columns: dict[str, None] = {}  # extra columns held, in order of first appearance
        if trace is not None:
            self.append(trace)

    def append(self, rows: Trace | Iterable[TraceRow]) -> None:
        """Add observed rows (e.g. completions reported by workers); later predictions see them.

        Extra columns past ``MAX_EXTRA_COLUMNS`` are left out (the first names met are kept), before
        the rows become columns: otherwise the chunk alone would be rows x names floats."""
        with self._lock:
            chunk = self._within_columns(rows)
            if len(chunk) == 0:
                return
            self._chunks.append(chunk)
            self._appends[int(chunk.step.min())] += 1
            if self.max_rows is not None:
                self._trim(sum(map(len, self._chunks)) - self.max_rows)
            if len(self._chunks) > MAX_CHUNKS:  # many small reports: one array, not thousands
                self._chunks = [Trace.concat(self._chunks)]

    def _within_columns(self, rows: Trace | Iterable[TraceRow]) -> Trace:
        """``rows`` as a trace of the extra columns this history holds (lock held), admitting new
        names while there is room; the features left out are logged once per append."""
        rows = rows if isinstance(rows, Trace) else list(rows)
        names = (
            [*rows.numeric, *rows.categorical]
            if isinstance(rows, Trace)
            else (name for row in rows for name in row.features)
        )
        left_out: set[str] = set()
        for name in names:
            if name in self._columns:
                continue
            if len(self._columns) < MAX_EXTRA_COLUMNS:
                self._columns[name] = None
            else:
                left_out.add(name)
        if left_out:
            _log.warning("left out %d feature names: a history holds %d", len(left_out), MAX_EXTRA_COLUMNS)
        if isinstance(rows, Trace):
            numeric = {k: v for k, v in rows.numeric.items() if k in self._columns}
            categorical = {k: v for k, v in rows.categorical.items() if k in self._columns}
            return replace(rows, numeric=numeric, categorical=categorical) if left_out else rows
        return Trace.from_rows(row if not left_out else _kept(row, self._columns) for row in rows)

    def _trim(self, excess: int) -> None:
        """Drop the ``excess`` oldest rows (lock held); what folded them in is stale then.

        Cheap at any size: whole chunks are dropped and the oldest remaining one is sliced (a view,
        no copy; the next concatenation frees what it no longer shows). The stats it invalidates
        are re-folded on the next prediction that needs them, as after any step's new rows.
        """
        if excess <= 0:
            return
        oldest = None
        while excess > 0:
            head = self._chunks[0]
            gone = head if len(head) <= excess else head.take(slice(0, excess))
            first = int(gone.step.min())
            oldest = first if oldest is None else min(oldest, first)
            if gone is head:
                self._chunks.pop(0)
            else:
                self._chunks[0] = head.take(slice(excess, None))
            excess -= len(gone)
        assert oldest is not None
        self._appends[oldest] += 1  # every step after the oldest dropped changes
        self._fold_dropped_steps()
        self._stats.clear()
        # columns only the dropped rows had make room for new names (a fleet's features may change)
        self._columns = dict.fromkeys(k for c in self._chunks for k in (*c.numeric, *c.categorical))

    def _fold_dropped_steps(self) -> None:
        """Fold the append counts of steps below every held row into the lowest one (lock held).

        ``_appends`` had one entry per step ever appended, so a capped history still grew with the
        run (and ``version_before`` summed them all on every prediction). Folded into the lowest
        key, a version only ever rises: a step between the folded keys sees a larger one (a re-fold,
        never a stale cache hit), and every step above them sees the same sum.
        """
        held = min((int(c.step.min()) for c in self._chunks if len(c)), default=None)
        dropped = [first for first in self._appends if held is None or first < held]
        if len(dropped) > 1:
            self._appends[min(dropped)] = sum(self._appends.pop(first) for first in dropped)

    def __len__(self) -> int:
        with self._lock:
            return sum(len(c) for c in self._chunks)

    @property
    def trace(self) -> Trace:
        """Every row observed so far, as one trace."""
        with self._lock:
            if len(self._chunks) > 1:
                self._chunks = [Trace.concat(self._chunks)]
            return self._chunks[0] if self._chunks else empty_trace()

    def version_before(self, step: int) -> int:
        """Changes exactly when rows of a step before ``step`` are added: the key of any cache of them."""
        with self._lock:
            return sum(n for first, n in self._appends.items() if first < step)

    def steps(self) -> IntArray:
        """Distinct steps observed, ascending."""
        return self.trace.steps()

    def stats_before(self, step: int) -> PromptStats:
        """Per-prompt aggregates of every row of a step strictly before ``step`` (cached)."""
        version = self.version_before(step)
        with self._lock:
            cached = self._stats.get(step)
        if cached is not None and cached[0] == version:
            return cached[1]
        stats = stats_of(self.trace, step)
        with self._lock:
            self._stats[step] = (version, stats)
            for old in sorted(self._stats)[:-4]:  # keep the four latest steps asked about
                del self._stats[old]
        return stats

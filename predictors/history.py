"""The observed rollouts, held as they arrive, and their per-prompt stats as of a given step.

``History`` is an append-only store of actual lengths (from a trace file, or from workers' reports as a
step runs). ``History.stats_before(step)`` caches the fold of ``predictors.promptstats`` per step, so
reports streaming in for the step being predicted do not force a re-fold; it also bounds what a
long-running service holds (rows and extra feature columns).
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from predictors import cutoff
from predictors.promptstats import PromptStats, resume_stats, stats_of
from predictors.stepgroups import factorize
from predictors.tracetable import IntArray, Trace, empty_trace
from scheduler.trace import TraceRow

MAX_CHUNKS = 256  # appends kept apart before ``History`` concatenates them (many tiny report batches)
# Extra feature columns a ``History`` holds. Each is a dense column over EVERY row (the model's input),
# so distinct names cost rows x names: reports inventing fresh names (64 a report, by the API's rule)
# grew a replica by ~1 GB from 900 rows, and the stream keeps them, so every restart met them again.
MAX_EXTRA_COLUMNS = 64
_log = logging.getLogger("predictors.history")


def _kept(row: TraceRow, columns: Mapping[str, None]) -> TraceRow:
    """``row`` with only the features named in ``columns``."""
    if all(name in columns for name in row.features):
        return row
    return replace(row, features={k: v for k, v in row.features.items() if k in columns})


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
        # each chunk's prompt codes in ``_ids`` (prompt id -> code, codes in insertion order), made as
        # it is appended: a full fold numbers prompts from them (``coded_first_seen``), not by hashing
        # every held row's id again (~60 ms of a ~150 ms fold at 1 M rows, at each capped append)
        self._codes: list[IntArray] = []
        self._ids: dict[str, int] = {}
        self._ids_kept = 0  # prompts ``_ids`` held at its last pruning (``_prune_ids``)
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
            self._codes.append(factorize(chunk.prompt_id, self._ids)[0])
            self._appends[int(chunk.step.min())] += 1
            if self.max_rows is not None:
                self._trim(sum(map(len, self._chunks)) - self.max_rows)
            if len(self._chunks) > MAX_CHUNKS:  # many small reports: one array, not thousands
                self._chunks, self._codes = [Trace.concat(self._chunks)], [np.concatenate(self._codes)]

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
                self._codes.pop(0)
            else:
                self._chunks[0] = head.take(slice(excess, None))
                self._codes[0] = self._codes[0][excess:]
            excess -= len(gone)
        assert oldest is not None
        self._appends[oldest] += 1  # every step after the oldest dropped changes
        self._fold_dropped_steps()
        self._stats.clear()
        # columns only the dropped rows had make room for new names (a fleet's features may change)
        self._columns = dict.fromkeys(k for c in self._chunks for k in (*c.numeric, *c.categorical))
        self._prune_ids()

    def _prune_ids(self) -> None:
        """Forget the prompt ids no held row has once they are over half of ``_ids`` (lock held), so a
        capped history's ids stay bounded by the prompts it holds; the codes are renumbered."""
        if len(self._ids) <= 2 * self._ids_kept + 1024:
            return
        names = list(self._ids)
        held = np.zeros(len(names), dtype=bool)
        for codes in self._codes:
            held[codes] = True
        kept = np.flatnonzero(held)
        renumbered = np.full(len(names), -1, dtype=np.int64)
        renumbered[kept] = np.arange(len(kept))
        self._codes = [renumbered[codes] for codes in self._codes]
        self._ids = {names[code]: new for new, code in enumerate(kept.tolist())}
        self._ids_kept = len(self._ids)

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
            return self._joined()

    def held(self) -> Callable[[], Trace]:
        """The rows held now, joined into one trace when the answer is called: ``trace`` joins under
        the lock every append and predict takes (0.1-0.6 s at 1.2 M rows, load 10: a retrain's
        snapshot held every request that long, learn51); this takes only the list of chunks."""
        with self._lock:
            chunks, codes = list(self._chunks), list(self._codes)
        return lambda: self._joined_from(chunks, codes)[0]

    def _joined(self) -> Trace:
        """``trace`` with the lock held."""
        if len(self._chunks) > 1:
            self._chunks, self._codes = [Trace.concat(self._chunks)], [np.concatenate(self._codes)]
        return self._chunks[0] if self._chunks else empty_trace()

    def _joined_from(self, chunks: list[Trace], codes: list[IntArray]) -> tuple[Trace, IntArray]:
        """``chunks`` (the oldest held, in order) and their ``codes`` as one trace and one array; the
        join replaces them where they are still held, as ``_joined`` keeps its join."""
        if len(chunks) <= 1:
            return (chunks[0], codes[0]) if chunks else (empty_trace(), np.empty(0, dtype=np.int64))
        joined, joined_codes = Trace.concat(chunks), np.concatenate(codes)
        with self._lock:
            held = self._chunks[: len(chunks)]
            if len(held) == len(chunks) and all(a is b for a, b in zip(held, chunks, strict=True)):
                self._chunks = [joined, *self._chunks[len(chunks) :]]
                self._codes = [joined_codes, *self._codes[len(chunks) :]]
        return joined, joined_codes

    def version_before(self, step: int) -> int:
        """Changes exactly when rows of a step before ``step`` are added: the key of any cache of them."""
        with self._lock:
            return self._version_before(step)

    def _version_before(self, step: int) -> int:
        """``version_before`` with the lock held."""
        return sum(n for first, n in self._appends.items() if first < step)

    def columns_before(self, step: int, *names: str, since: int | None = None) -> tuple[IntArray, ...]:
        """The columns ``names`` (of ``Trace``'s integer ones) of the rows of steps before ``step``
        (and from ``since`` on, where given), in arrival order, taken chunk by chunk: ``trace`` would
        join every column of every row first (~20 ms at 1.2 M rows), where the global prior reads two
        columns of them (of the steps it had not counted, with ``since``)."""
        with self._lock:
            chunks = list(self._chunks)
        earlier = [_rows_of_steps(c, since, step) for c in chunks]
        return tuple(
            np.concatenate([getattr(c, name)[m] for c, m in zip(chunks, earlier, strict=True)])
            if chunks
            else np.empty(0, dtype=np.int64)
            for name in names
        )

    def stats_before(self, step: int) -> PromptStats:
        """Per-prompt aggregates of every row of a step strictly before ``step`` (cached).

        A miss resumes from the latest cached stats still valid (no row of their earlier steps has
        arrived since), folding only the rows of the steps between: what the service meets at every
        step (the actuals of step s, then the predict of s + 1). Else, or should a row of an earlier
        step lie after those rows (``_between``), the whole history is re-folded."""
        with self._lock:
            version = self._version_before(step)
            cached = self._stats.get(step)
            if cached is not None and cached[0] == version:
                return cached[1]
            base = self._resumable(step)
            chunks = list(self._chunks)  # the rows ``version`` and ``base`` stand for, none that came after
            codes, ids = list(self._codes), self._ids
        rows = None if base is None else _between(chunks, codes, base.before, step)
        if base is None or rows is None:
            # appends grow ``ids`` at its end (codes held keep theirs); a pruning replaces it
            with self._lock:
                names = list(ids)
            cutoff.check()  # a request's deadline: a full fold of 1 M rows is ~100 ms of CPU (deadline49)
            trace, joined_codes = self._joined_from(chunks, codes)
            cutoff.check()
            stats = stats_of(trace, step, (joined_codes, names))
        else:
            stats = resume_stats(base, rows[0], step, codes=rows[1])
        with self._lock:
            self._stats[step] = (version, stats)
            for old in sorted(self._stats)[:-4]:  # keep the four latest steps asked about
                del self._stats[old]
        return stats

    def _resumable(self, step: int) -> PromptStats | None:
        """The cached stats of the latest step before ``step`` that no new row invalidated (lock held)."""
        valid = [b for b, (v, _) in self._stats.items() if b < step and v == self._version_before(b)]
        return self._stats[max(valid)][1] if valid else None


def _between(
    chunks: list[Trace], codes: list[IntArray], start: int, stop: int
) -> tuple[Trace, IntArray] | None:
    """The rows of steps ``start`` to ``stop - 1`` of ``chunks`` (in order) and their prompt codes
    (of ``codes``, each chunk's), or None where a row of a
    step before ``start`` comes after one of them: ``stats_of`` would then number the prompts in
    another order than a fold resumed from ``start`` (first seen over all those rows), and the stats
    would not be identical. Read chunk by chunk, without joining them: the join copied every column
    of every row (~20 ms at 1.2 M rows) on each replica's first predict of a step, for the few rows
    of one step. Only the columns the fold reads are kept."""
    parts: list[Trace] = []
    coded: list[IntArray] = []
    for chunk, chunk_codes in zip(chunks, codes, strict=True):
        if len(chunk) == 0:
            continue
        low, high = _steps_of(chunk)
        if high < start:  # every row older: after rows of these steps, the fold cannot resume
            if parts:
                return None
            continue
        if low >= start and (low >= stop or high < stop):  # no row older; none of these steps, or all
            if high < stop:
                parts.append(replace(chunk, numeric={}, categorical={}))
                coded.append(chunk_codes)
            continue
        old = chunk.step < start
        new = (chunk.step >= start) & (chunk.step < stop)
        if old.any() and (
            parts or (new.any() and int(np.argmax(new)) < len(old) - 1 - int(np.argmax(old[::-1])))
        ):
            return None
        if new.any():
            parts.append(replace(chunk, numeric={}, categorical={}).take(new))
            coded.append(chunk_codes[new])
    return Trace.concat(parts), np.concatenate(coded) if coded else np.empty(0, dtype=np.int64)


def _rows_of_steps(chunk: Trace, start: int | None, stop: int) -> slice | npt.NDArray[np.bool_]:
    """The rows of ``chunk`` of steps ``start`` (None: any) to ``stop - 1``: every row or none (a
    slice: no mask is made), else a mask."""
    if len(chunk) == 0:
        return slice(0, 0)
    low, high = _steps_of(chunk)
    if (start is None or low >= start) and high < stop:
        return slice(None)
    if low >= stop or (start is not None and high < start):
        return slice(0, 0)
    earlier = chunk.step < stop
    return earlier if start is None else earlier & (chunk.step >= start)


_step_ranges: weakref.WeakKeyDictionary[Trace, tuple[int, int]] = weakref.WeakKeyDictionary()


def _steps_of(chunk: Trace) -> tuple[int, int]:
    """The lowest and highest step of ``chunk``'s rows (it has some), found once per
    chunk (chunks are never changed, only replaced): the first predict of each step compared every
    held row's step, for the fold and again for the prior (~4 ms of CPU at 1.2 M rows), to find
    the rows of the one step that came since."""
    found = _step_ranges.get(chunk)
    if found is None:
        found = (int(chunk.step.min()), int(chunk.step.max()))
        _step_ranges[chunk] = found
    return found

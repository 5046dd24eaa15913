"""What the rows of earlier steps say about each prompt: ``PromptStats`` and the fold that builds it.

``stats_of(trace, before)`` folds every row of an earlier step, in step order, into per-prompt
aggregates: the only view of the past that features may read, which is what makes "no leakage" a
property of one function rather than of every caller. ``walk_steps`` yields the same aggregates for
each step of a trace in turn, so training sees exactly what serving (``History.stats_before``) will see.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import repeat
from typing import Any

import numpy as np

from predictors import cutoff
from predictors.stepgroups import StepGroups, coded_first_seen, factorize, recoded, step_groups
from predictors.tracetable import FloatArray, IntArray, Trace

EWM_ALPHA = 0.5  # weight of the newest step in the exponentially weighted mean of step means


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
    log_total: FloatArray  # sum of log length (log of max(tokens, 1)), all earlier steps
    log_sumsq: FloatArray  # sum of squared log length, all earlier steps
    step_ids: IntArray  # earlier steps, ascending
    step_means: FloatArray  # global mean output tokens of each of those steps
    step_rates: FloatArray  # per step: mean over its prompts that ran before of the change of log mean
    # length per step since their last run (drift free of which prompts ran); NaN where none had run
    step_matched: IntArray  # per step: how many such prompts ``step_rates`` averages
    step_longest_gap: IntArray  # per step: the most steps one of its prompts had gone unrun (0: none)

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


def _blank(p: int) -> tuple[dict[str, IntArray], dict[str, FloatArray]]:
    """The state of ``p`` prompts never seen: zeros, except no last step (-1) and no reward (NaN)."""
    ints = {k: np.zeros(p, dtype=np.int64) for k in ("count", "truncated", "last_n", "last_truncated")}
    ints |= {"within_df": np.zeros(p, dtype=np.int64), "last_step": np.full(p, -1, dtype=np.int64)}
    names = ("total", "last_mean", "last_max", "last_std", "ewm_mean", "within_ss", "last_trunc_cap")
    floats = {k: np.zeros(p) for k in (*names, "last_trunc_len", "log_total", "log_sumsq")}
    floats["last_reward"] = np.full(p, np.nan)
    return ints, floats


class _Fold:
    """Mutable per-prompt state, advanced one step at a time; ``snapshot`` freezes it."""

    def __init__(self, index: dict[str, int]) -> None:
        self.index = index
        self.ints, self.floats = _blank(len(index))
        self.step_ids: list[int] = []
        self.step_means: list[float] = []
        self.step_rates: list[float] = []
        self.step_matched: list[int] = []
        self.step_longest_gap: list[int] = []

    @classmethod
    def resumed(cls, stats: PromptStats) -> _Fold:
        """The state ``stats`` froze, copied (the snapshot stays as it was): a fold to advance further."""
        fold = cls(dict(stats.index))
        for arrays in (fold.ints, fold.floats):
            for name, array in arrays.items():
                array[:] = getattr(stats, name)
        fold.step_ids = stats.step_ids.tolist()
        fold.step_means = stats.step_means.tolist()
        fold.step_rates = stats.step_rates.tolist()
        fold.step_matched = stats.step_matched.tolist()
        fold.step_longest_gap = stats.step_longest_gap.tolist()
        return fold

    def grow(self) -> None:
        """Extend every array to the index's size, new prompts holding what ``__init__`` gives them."""
        ints, floats = _blank(len(self.index) - len(self.ints["count"]))
        self.ints = {k: np.concatenate([v, ints[k]]) for k, v in self.ints.items()}
        self.floats = {k: np.concatenate([v, floats[k]]) for k, v in self.floats.items()}

    def advance(self, g: StepGroups, sel: slice, step: int) -> None:
        """Fold the groups ``g[sel]`` (all of one step) into the state."""
        p, n = g.prompt[sel], g.n[sel]
        mean = g.total[sel] / n
        f, i = self.floats, self.ints
        seen = i["last_step"][p] >= 0
        self._matched_rate(p[seen], mean[seen], step)
        f["ewm_mean"][p] = np.where(seen, EWM_ALPHA * mean + (1 - EWM_ALPHA) * f["ewm_mean"][p], mean)
        f["total"][p] += g.total[sel]
        f["last_mean"][p] = mean
        f["last_max"][p] = g.maximum[sel]
        f["last_std"][p] = np.sqrt(np.maximum(g.sumsq[sel] / n - mean * mean, 0.0))
        f["within_ss"][p] += np.maximum(g.log_sumsq[sel] - g.log_sum[sel] ** 2 / n, 0.0)
        f["log_total"][p] += g.log_sum[sel]
        f["log_sumsq"][p] += g.log_sumsq[sel]
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

    def _matched_rate(self, p: IntArray, mean: FloatArray, step: int) -> None:
        """Record the step's drift as its prompts ``p`` that ran before (now of mean length ``mean``)
        show it: their change of log mean per step since their last run, averaged; and the longest of
        those gaps (the model's fit sees it: ``predictors.drift`` projects only beyond it)."""
        self.step_matched.append(len(p))
        if len(p) == 0:
            self.step_rates.append(float("nan"))
            self.step_longest_gap.append(0)
            return
        before = np.log(np.maximum(self.floats["last_mean"][p], 1.0))
        change = np.log(np.maximum(mean, 1.0)) - before
        since = step - self.ints["last_step"][p]
        self.step_rates.append(float(np.mean(change / since)))
        self.step_longest_gap.append(int(since.max()))

    def snapshot(self, before: int) -> PromptStats:
        """An immutable copy of the state: the stats of every row before ``before``."""
        arrays: dict[str, Any] = {k: v.copy() for k, v in (*self.ints.items(), *self.floats.items())}
        return PromptStats(
            before=before,
            index=self.index,
            **arrays,
            step_ids=np.asarray(self.step_ids, dtype=np.int64),
            step_means=np.asarray(self.step_means),
            step_rates=np.asarray(self.step_rates, dtype=np.float64),
            step_matched=np.asarray(self.step_matched, dtype=np.int64),
            step_longest_gap=np.asarray(self.step_longest_gap, dtype=np.int64),
        )


def walk_steps(trace: Trace) -> Iterator[tuple[int, PromptStats, IntArray, StepGroups]]:
    """For each step, ascending: (step, stats of all earlier steps, row indices of the step, the
    groups of the whole trace, which ``row_group`` of those rows indexes).

    Training builds its examples from these, serving from ``History.stats_before``; both are the
    same fold, so a feature cannot see its own step in one and not the other.
    """
    codes, index = factorize(trace.prompt_id)
    groups = step_groups(trace, codes)
    fold = _Fold(index)
    bounds = _step_bounds(groups)
    starts, ends = bounds[:-1], bounds[1:]
    row_order = np.argsort(groups.row_group, kind="stable")
    row_bounds = np.searchsorted(groups.row_group[row_order], starts)
    row_ends = np.searchsorted(groups.row_group[row_order], ends)
    for start, end, r0, r1 in zip(starts, ends, row_bounds, row_ends, strict=True):
        step = int(groups.step[start])
        yield step, fold.snapshot(step), row_order[r0:r1], groups
        fold.advance(groups, slice(start, end), step)


def stats_of(trace: Trace, before: int, coded: tuple[IntArray, Sequence[str]] | None = None) -> PromptStats:
    """The per-prompt stats of the rows of ``trace`` with step < ``before``; ``coded``, where given,
    is each row's prompt code and the prompt id of each code (``History`` keeps them as rows come),
    which number the prompts as hashing every row's id would, at a fraction of its cost.

    The fold reads none of the extra feature columns, so they are not copied with the rows; and
    where every row is earlier (the next step's predict, its actuals all in), none is copied at all:
    the copy was ~60 ms of each full fold at 1 M rows (a capped history re-folds at every append)."""
    earlier = trace.step < before
    every = bool(earlier.all())
    past = trace if every else replace(trace, numeric={}, categorical={}).take(earlier)
    if coded is None:
        codes, index = factorize(past.prompt_id)
    else:
        codes, index = coded_first_seen(coded[0] if every else coded[0][earlier], coded[1])
    cutoff.check()  # a request's deadline (``predictors.cutoff``) between the fold's passes (deadline49)
    fold = _Fold(index)
    _advance_steps(fold, past, codes)
    return fold.snapshot(before)


def resume_stats(stats: PromptStats, rows: Trace, before: int, codes: IntArray | None = None) -> PromptStats:
    """``stats`` advanced over ``rows``: every row of steps ``stats.before`` to ``before - 1``, in
    the order they follow the rows ``stats`` folded; ``codes``, where given, number the rows' prompts
    (equal codes, equal ids: ``History``'s), so only each prompt's first row is hashed (``recoded``).

    The same arithmetic in the same order as ``stats_of`` over both sets of rows, so the result is
    identical to it, bit for bit, while costing only the new rows (the service's first predict of
    every step; a full re-fold of 1 M rows took ~350 ms). The caller vouches for the order: a row of
    an earlier step that came after these would be numbered earlier by ``stats_of``.
    """
    fold = _Fold.resumed(stats)
    index = fold.index
    mine = factorize(rows.prompt_id, index)[0] if codes is None else recoded(codes, rows.prompt_id, index)
    fold.grow()
    _advance_steps(fold, rows, mine)
    return fold.snapshot(before)


def _advance_steps(fold: _Fold, rows: Trace, codes: IntArray) -> None:
    """Fold ``rows`` (prompt codes ``codes``) into ``fold`` one step at a time, ascending."""
    if len(rows):
        groups = step_groups(rows, codes)
        for start, end in itertools.pairwise(_step_bounds(groups).tolist()):
            cutoff.check()
            fold.advance(groups, slice(start, end), int(groups.step[start]))


def _step_bounds(groups: StepGroups) -> IntArray:
    """Where each step's groups start (groups are sorted by step), then their count: step k's
    groups are ``bounds[k]`` to ``bounds[k + 1]``."""
    inner = np.flatnonzero(np.diff(groups.step)) + 1
    return np.concatenate([[0], inner, [len(groups.step)]]).astype(np.int64)

"""Answers when the model cannot give one: the prompt's own history mean, else a prompt-length prior.

A prompt seen before is best described by its own mean; its spread comes from the pooled within-step
variation of every prompt (one step of four samples says little about one prompt's tail). A prompt
never seen gets the history's length distribution among prompts of similar length (quantile bins of
prompt tokens). With no history at all, the uninformed prior is a fixed share of the cap, stated in
``PriorDefaults`` so that a caller can see and change it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from predictors.promptprior import PriorRows
from predictors.promptstats import PromptStats
from predictors.quantiles import Z90
from predictors.tracetable import FloatArray, IntArray

MIN_BIN_ROWS = 50  # a prompt-length bin needs this many rows to stand on its own
MAX_BINS = 8
# Lengths up to this are counted (``_counted_prior``); past it the rows are partitioned: a count table
# that wide would cost more than the rows
COUNTED_MAX = 1 << 17


@dataclass(frozen=True)
class PriorDefaults:
    """The answer with no history at all, as shares of each query's max_new_tokens."""

    p50_share: float = 0.25  # median length assumed: a quarter of the cap
    p90_share: float = 0.75  # p90 assumed: three quarters of the cap


@dataclass(frozen=True, eq=False)
class GlobalPrior:
    """Output-length p50/p90/mean per bin of prompt tokens, from every row of history."""

    edges: FloatArray  # inner bin edges on prompt tokens (len = bins - 1)
    p50: FloatArray  # per bin
    p90: FloatArray  # per bin
    mean: FloatArray  # per bin
    rows: int  # history rows it was built from
    defaults: PriorDefaults

    @staticmethod
    def of(
        prompt_tokens: IntArray, output_tokens: IntArray, defaults: PriorDefaults | None = None
    ) -> GlobalPrior:
        """The prior of the rows whose two columns these are: bins of roughly equal row counts (each
        >= MIN_BIN_ROWS), so each bin's quantiles are stable.

        It takes the two columns it reads, not a ``Trace``: the predictor selects only those of the
        rows before a step, where taking those rows of the whole trace copied every column (extra
        features too), a 264 MiB peak for 2 M rows with 8 extra columns at each step's first predict."""
        defaults = defaults or PriorDefaults()
        counted = _counted_prior(prompt_tokens, output_tokens)
        edges, p50, p90, mean = (
            counted if counted is not None else _sorted_prior(prompt_tokens, output_tokens)
        )
        return GlobalPrior(
            edges=edges, p50=p50, p90=p90, mean=mean, rows=len(output_tokens), defaults=defaults
        )

    def predict(self, prompt_tokens: IntArray, caps: IntArray) -> tuple[FloatArray, FloatArray]:
        """(p50, p90) for prompts of these lengths; the cap-share defaults where history is empty."""
        if self.rows == 0:
            c = caps.astype(np.float64)
            return c * self.defaults.p50_share, c * self.defaults.p90_share
        b = np.searchsorted(self.edges, prompt_tokens, side="right")
        return self.p50[b], self.p90[b]


def _bins_of(n: int) -> FloatArray:
    """The quantile levels of the inner bin edges for ``n`` rows."""
    n_bins = max(1, min(MAX_BINS, n // MIN_BIN_ROWS))
    return np.linspace(0, 1, n_bins + 1)[1:-1]


def _sorted_prior(prompt_tokens: IntArray, output_tokens: IntArray) -> tuple[FloatArray, ...]:
    """(edges, p50, p90, mean) from the rows themselves: numpy's quantiles of each bin's rows."""
    y = output_tokens.astype(np.float64)
    cuts = np.quantile(prompt_tokens, _bins_of(len(y))) if len(y) else np.empty(0)
    edges = _without_empty_bins(np.unique(np.asarray(cuts, dtype=np.float64)), prompt_tokens)
    bins = np.searchsorted(edges, prompt_tokens, side="right")
    stats = [_bin_stats(y[bins == b]) for b in range(len(edges) + 1)]
    return edges, *(np.array([s[i] for s in stats]) for i in range(3))


def _counted_prior(prompt_tokens: IntArray, output_tokens: IntArray) -> tuple[FloatArray, ...] | None:
    """``_sorted_prior``'s answer, identical to the bit, from counts of each length; None where the
    lengths do not suit counting (none, negative, past ``COUNTED_MAX``).

    Every figure of the prior is an order statistic or an integer sum of the rows, which counts
    give exactly, so the rows need neither a partition per quantile nor a mask per bin: 6.5 ms
    of CPU where those took 61 ms at 1 M rows, on every replica's first predict of each step. Each
    quantile is numpy's own over the two order statistics it interpolates (``_quantile_of``)."""
    n = len(output_tokens)
    if n == 0 or min(int(prompt_tokens.min()), int(output_tokens.min())) < 0:
        return None
    top_p, top_y = int(prompt_tokens.max()), int(output_tokens.max())
    if max(top_p, top_y) > COUNTED_MAX or top_y * n >= 2**53:  # sums past 2**53 would round
        return None
    per_length = np.bincount(prompt_tokens)
    lengths = np.flatnonzero(per_length)
    cuts = _quantile_of(lengths, np.cumsum(per_length[lengths]), _bins_of(n), prompt_tokens.dtype)
    edges = _without_empty_bins(np.unique(cuts), lengths, per_length[lengths])
    bin_of_length = np.searchsorted(edges, np.arange(top_p + 1), side="right")
    width = top_y + 1
    counts = np.bincount(
        bin_of_length[prompt_tokens] * width + output_tokens, minlength=(len(edges) + 1) * width
    )
    stats = [_counted_bin_stats(row) for row in counts.reshape(len(edges) + 1, width)]
    return edges, *(np.array([s[i] for s in stats]) for i in range(3))


def _counted_bin_stats(counts: IntArray) -> tuple[float, float, float]:
    """``_bin_stats`` of the rows whose lengths ``counts`` counts (``counts[v]`` rows of length v)."""
    values = np.flatnonzero(counts)
    cumulative = np.cumsum(counts[values])
    n = int(cumulative[-1])
    middle = _order_statistics(values, cumulative, [(n - 1) // 2, n // 2]).astype(np.float64)
    median = float(np.median(middle[:1] if n % 2 else middle))
    p90 = float(_quantile_of(values, cumulative, np.array([0.9]), np.dtype(np.float64))[0])
    return median, p90, float(int((values * counts[values]).sum()) / n)


def _order_statistics(values: IntArray, cumulative: IntArray, ranks: list[int] | IntArray) -> IntArray:
    """The ``ranks``-th smallest (0-based) of rows counted as ``cumulative`` over sorted ``values``."""
    return values[np.searchsorted(cumulative, np.asarray(ranks), side="right")]


def _quantile_of(values: IntArray, cumulative: IntArray, levels: FloatArray, dtype: np.dtype) -> FloatArray:
    """``np.quantile`` (linear) at ``levels`` of the rows counted as ``cumulative`` over ``values``,
    as ``dtype``, to the bit: numpy interpolates between the order statistics at the floor and the
    floor + 1 of ``(n - 1) * level`` (both the last where that passes n - 1) by the fraction, so the
    same fraction asked of those two values alone is the same arithmetic on the same numbers."""
    n = int(cumulative[-1])
    out = np.empty(len(levels))
    for i, level in enumerate(levels):
        virtual = (n - 1) * np.float64(level)
        below = n - 1 if virtual >= n - 1 else int(np.floor(virtual))
        pair = _order_statistics(values, cumulative, [below, min(below + 1, n - 1)]).astype(dtype)
        out[i] = np.quantile(pair, virtual - np.floor(virtual) if virtual < n - 1 else 0.0)
    return out


def _without_empty_bins(
    edges: FloatArray, prompt_tokens: IntArray, counts: IntArray | None = None
) -> FloatArray:
    """``edges`` less those that bound a bin no row falls in (merged into its neighbour); with
    ``counts``, ``prompt_tokens`` are distinct lengths of that many rows each.

    Interpolated quantile cuts leave such bins where many prompts share one length (every prompt of
    512 tokens puts every row at or past a cut of 512): their quantiles were NaN, and a new prompt
    shorter than the cut got a NaN prediction, which failed the whole batch's validation."""
    while len(edges):
        at = np.searchsorted(edges, prompt_tokens, side="right")
        rows = np.bincount(at, weights=counts, minlength=len(edges) + 1)
        empty = np.flatnonzero(rows == 0)
        if len(empty) == 0:
            break
        edges = np.delete(edges, max(int(empty[0]) - 1, 0))
    return edges


def _bin_stats(y: FloatArray) -> tuple[float, float, float]:
    if len(y) == 0:
        return (np.nan, np.nan, np.nan)
    return (float(np.median(y)), float(np.quantile(y, 0.9)), float(y.mean()))


def pooled_log_sd(stats: PromptStats) -> float:
    """The log spread of a prompt's next sample around its history: within-step std of log length
    pooled over every prompt; where no prompt ran twice in one step, the std of each prompt's
    samples around their own log mean across its steps, pooled; where no prompt ran twice at all,
    the std of log length over every earlier sample (between prompts too, so wider than the truth).

    One sample per prompt a step is how PPO-style runs sample. The within-step spread alone was 0
    there, and the history mean's p90 was its p50: it covered half the next step's lengths, not
    90% (short-cot, 200 prompts, one sample a step: 0.45-0.51 at each of steps 1-4).
    0 only with fewer than two earlier samples."""
    df = int(stats.within_df.sum())
    if df > 0:
        return float(np.sqrt(stats.within_ss.sum() / df))
    seen = stats.count > 0
    count, total, sumsq = stats.count[seen], stats.log_total[seen], stats.log_sumsq[seen]
    across_df = int((count - 1).sum())
    if across_df > 0:
        return float(np.sqrt(np.maximum(sumsq - total**2 / count, 0.0).sum() / across_df))
    n = int(count.sum())
    if n < 2:
        return 0.0
    return float(np.sqrt(max(float(sumsq.sum()) - float(total.sum()) ** 2 / n, 0.0) / (n - 1)))


def prompt_mean(prior: PriorRows, sigma: float) -> tuple[FloatArray, FloatArray]:
    """(p50, p90) from the prompt's history mean, p90 stretched by the pooled log spread."""
    return prior.hist_mean, prior.hist_mean * np.exp(Z90 * sigma)

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

from predictors.priorcounts import PriorCounts, bins_of, counts_of, without_empty_bins
from predictors.promptprior import PriorRows
from predictors.promptstats import PromptStats
from predictors.quantiles import Z90
from predictors.tracetable import FloatArray, IntArray


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
    counts: PriorCounts | None = None  # what a counted prior was made of (``advanced`` adds to them)

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
        counts = counts_of(prompt_tokens, output_tokens)
        if counts is not None:
            return _from_counts(counts, defaults)
        edges, p50, p90, mean = _sorted_prior(prompt_tokens, output_tokens)
        return GlobalPrior(
            edges=edges, p50=p50, p90=p90, mean=mean, rows=len(output_tokens), defaults=defaults
        )

    def advanced(self, prompt_tokens: IntArray, output_tokens: IntArray) -> GlobalPrior | None:
        """``of`` the rows this prior was built from and these more, identical to the bit, from this
        prior's counts and theirs; None where that needs every row again (``PriorCounts.advanced``).

        The next step's first predict had counted every row held (~17 ms of CPU at 1.2 M rows, a
        step of 32,768 new ones): the counts per prompt length and per bin are sums over rows."""
        counts = None if self.counts is None else self.counts.advanced(prompt_tokens, output_tokens)
        return None if counts is None else _from_counts(counts, self.defaults)

    def predict(self, prompt_tokens: IntArray, caps: IntArray) -> tuple[FloatArray, FloatArray]:
        """(p50, p90) for prompts of these lengths; the cap-share defaults where history is empty."""
        if self.rows == 0:
            c = caps.astype(np.float64)
            return c * self.defaults.p50_share, c * self.defaults.p90_share
        b = np.searchsorted(self.edges, prompt_tokens, side="right")
        return self.p50[b], self.p90[b]


def _sorted_prior(prompt_tokens: IntArray, output_tokens: IntArray) -> tuple[FloatArray, ...]:
    """(edges, p50, p90, mean) from the rows themselves: numpy's quantiles of each bin's rows."""
    y = output_tokens.astype(np.float64)
    cuts = np.quantile(prompt_tokens, bins_of(len(y))) if len(y) else np.empty(0)
    edges = without_empty_bins(np.unique(np.asarray(cuts, dtype=np.float64)), prompt_tokens)
    bins = np.searchsorted(edges, prompt_tokens, side="right")
    stats = [_bin_stats(y[bins == b]) for b in range(len(edges) + 1)]
    return edges, *(np.array([s[i] for s in stats]) for i in range(3))


def _counted_prior(prompt_tokens: IntArray, output_tokens: IntArray) -> tuple[FloatArray, ...] | None:
    """``_sorted_prior``'s answer, identical to the bit, from counts of each length; None where the
    lengths do not suit counting (none, negative, past ``priorcounts.COUNTED_MAX``).

    Every figure of the prior is an order statistic or an integer sum of the rows, which counts
    give exactly, so the rows need neither a partition per quantile nor a mask per bin: 6.5 ms
    of CPU where those took 61 ms at 1 M rows, on every replica's first predict of each step. Each
    quantile is numpy's own over the two order statistics it interpolates (``priorcounts.quantile_of``)."""
    counts = counts_of(prompt_tokens, output_tokens)
    return None if counts is None else counts.figures()


def _from_counts(counts: PriorCounts, defaults: PriorDefaults) -> GlobalPrior:
    """The prior whose figures ``counts`` give, holding them where they are worth keeping for the
    next step's ``advanced`` (``PriorCounts.worth_keeping``); else it is counted afresh."""
    edges, p50, p90, mean = counts.figures()
    kept = counts if counts.worth_keeping else None
    return GlobalPrior(
        edges=edges, p50=p50, p90=p90, mean=mean, rows=counts.rows, defaults=defaults, counts=kept
    )


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

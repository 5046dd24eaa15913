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

from predictors.features import PriorRows
from predictors.promptstats import PromptStats
from predictors.quantiles import Z90, ordered
from predictors.tracetable import FloatArray, IntArray, Trace

MIN_BIN_ROWS = 50  # a prompt-length bin needs this many rows to stand on its own
MAX_BINS = 8


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
    def fit(history: Trace, defaults: PriorDefaults | None = None) -> GlobalPrior:
        """Bins of roughly equal row counts (each >= MIN_BIN_ROWS), so each bin's quantiles are stable."""
        return GlobalPrior.of(history.prompt_tokens, history.output_tokens, defaults)

    @staticmethod
    def of(
        prompt_tokens: IntArray, output_tokens: IntArray, defaults: PriorDefaults | None = None
    ) -> GlobalPrior:
        """``fit`` from the two columns it reads: the predictor selects only those of the rows before
        a step, where taking those rows of the whole trace copied every column (extra features too),
        a 264 MiB peak for 2 M rows with 8 extra columns at each step's first predict."""
        defaults = defaults or PriorDefaults()
        y = output_tokens.astype(np.float64)
        n_bins = max(1, min(MAX_BINS, len(y) // MIN_BIN_ROWS))
        levels = np.linspace(0, 1, n_bins + 1)[1:-1]
        cuts = np.quantile(prompt_tokens, levels) if len(y) else np.empty(0)
        edges = _without_empty_bins(np.unique(np.asarray(cuts, dtype=np.float64)), prompt_tokens)
        bins = np.searchsorted(edges, prompt_tokens, side="right")
        stats = [_bin_stats(y[bins == b]) for b in range(len(edges) + 1)]
        return GlobalPrior(
            edges=edges,
            p50=np.array([s[0] for s in stats]),
            p90=np.array([s[1] for s in stats]),
            mean=np.array([s[2] for s in stats]),
            rows=len(y),
            defaults=defaults,
        )

    def predict(self, prompt_tokens: IntArray, caps: IntArray) -> tuple[FloatArray, FloatArray]:
        """(p50, p90) for prompts of these lengths; the cap-share defaults where history is empty."""
        if self.rows == 0:
            c = caps.astype(np.float64)
            return c * self.defaults.p50_share, c * self.defaults.p90_share
        b = np.searchsorted(self.edges, prompt_tokens, side="right")
        return self.p50[b], self.p90[b]


def _without_empty_bins(edges: FloatArray, prompt_tokens: IntArray) -> FloatArray:
    """``edges`` less those that bound a bin no row falls in (merged into its neighbour).

    Interpolated quantile cuts leave such bins where many prompts share one length (every prompt of
    512 tokens puts every row at or past a cut of 512): their quantiles were NaN, and a new prompt
    shorter than the cut got a NaN prediction, which failed the whole batch's validation."""
    while len(edges):
        counts = np.bincount(np.searchsorted(edges, prompt_tokens, side="right"), minlength=len(edges) + 1)
        empty = np.flatnonzero(counts == 0)
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


def global_mean(history: Trace, caps: IntArray) -> tuple[FloatArray, FloatArray]:
    """The length-blind baseline: history's mean for every query, its empirical p90 as the p90, both
    clipped to [1, cap] like every serving answer (a cap cut below the history's lengths would
    otherwise score the baseline on lengths no query can reach)."""
    y = history.output_tokens.astype(np.float64)
    n = len(caps)
    return ordered(np.full(n, y.mean()), np.full(n, np.quantile(y, 0.9)), caps)

"""The counts the global prior is made of, kept so that the next step's prior adds only its rows.

``predictors.fallbacks.GlobalPrior`` bins rows by quantiles of prompt length and reads each bin's
output-length quantiles. Where lengths are small integers every figure of it is an order statistic
or an integer sum, which counts of each length give exactly (``counted_bin_stats``), and counts add:
a prior of the rows held and one more step's is the old counts plus the step's, wherever the bin
edges (quantiles of the prompt lengths, themselves from the additive per-length counts) did not move.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from predictors.tracetable import FloatArray, IntArray

MIN_BIN_ROWS = 50  # a prompt-length bin needs this many rows to stand on its own
MAX_BINS = 8
# Lengths up to this are counted (``PriorCounts``); past it the rows are partitioned: a count table
# that wide would cost more than the rows
COUNTED_MAX = 1 << 17
# Cells of a count table kept for the next step whatever the rows it counts (512 KiB of int64); a
# larger one is kept only where it counts more rows than its cells (``PriorCounts.worth_keeping``)
KEPT_CELLS = 1 << 16
# Cells of count tables a predictor's cache of priors holds in all, the newest step's among them (4 MiB
# of int64; ``predictors.predictor._bounded``): the newest step's are kept whatever their size, an older
# step's only within what they leave. Four tables of a bench-like history (~33,000 cells each) fit,
# where four of lengths near ``COUNTED_MAX``, each worth keeping over 1.2 M rows, had held ~40 MiB
# (edges61)
CACHE_CELLS = 1 << 19


@dataclass(frozen=True, eq=False)
class PriorCounts:
    """Rows of each prompt length, the bin edges they give, and rows of each output length per bin."""

    per_length: IntArray  # rows of prompt length v at [v], up to the longest
    edges: FloatArray  # inner bin edges on prompt tokens
    per_bin: IntArray  # (bins, longest output + 1): rows of output length v of bin b at [b, v]
    rows: int
    dtype: np.dtype  # the prompt lengths' (numpy's quantiles are taken in it)

    def advanced(
        self, prompt_tokens: IntArray, output_tokens: IntArray, every: bool = False
    ) -> PriorCounts | None:
        """These counts and those of the rows given, identical to counting all of them at once; None
        where all of them would not be counted (a negative length, one past ``COUNTED_MAX``, sums
        past 2**53), or where the bin edges moved (the rows counted before fall into other bins:
        they must be counted again). ``every``: these counts are empty, the rows are all there is."""
        if len(output_tokens) and (
            min(int(prompt_tokens.min()), int(output_tokens.min())) < 0 or prompt_tokens.dtype != self.dtype
        ):
            return None
        n = self.rows + len(output_tokens)
        top_p = max(len(self.per_length) - 1, int(prompt_tokens.max()) if len(prompt_tokens) else -1)
        top_y = max(self.per_bin.shape[1] - 1, int(output_tokens.max()) if len(output_tokens) else 0)
        if n == 0 or max(top_p, top_y) > COUNTED_MAX or top_y * n >= 2**53:  # sums past 2**53 round
            return None
        per_length = np.bincount(prompt_tokens, minlength=top_p + 1)
        per_length[: len(self.per_length)] += self.per_length
        lengths = np.flatnonzero(per_length)
        cuts = quantile_of(lengths, np.cumsum(per_length[lengths]), bins_of(n), self.dtype)
        edges = without_empty_bins(np.unique(cuts), lengths, per_length[lengths])
        if not every and (len(edges) != len(self.edges) or not np.array_equal(edges, self.edges)):
            return None
        width = top_y + 1
        if len(prompt_tokens) > top_p:  # a bin per length, looked up: a search per row was ~10 ms at 1.2 M
            bins = np.searchsorted(edges, np.arange(top_p + 1), side="right")[prompt_tokens]
        else:  # one step's rows, fewer than the lengths
            bins = np.searchsorted(edges, prompt_tokens, side="right")
        per_bin = np.bincount(bins * width + output_tokens, minlength=(len(edges) + 1) * width)
        per_bin = per_bin.reshape(len(edges) + 1, width)
        if not every:
            per_bin[:, : self.per_bin.shape[1]] += self.per_bin
        return PriorCounts(per_length, edges, per_bin, n, self.dtype)

    @property
    def cells(self) -> int:
        """Cells of the tables (int64 each): what holding these counts costs."""
        return self.per_length.size + self.per_bin.size

    @property
    def worth_keeping(self) -> bool:
        """Whether these counts are worth holding for ``advanced``: a table of ``KEPT_CELLS`` or fewer,
        or of no more cells than the rows it counts. An advance costs a pass over every cell (the bin
        table added to), a count afresh the same and one over the rows, so a table wider than its
        rows saves at most half of a short count, where it held up to ~9 MiB (9 bins x 2**17 output
        lengths of int64), four times over in a predictor's cache, for a history of 32,768 rows
        whose columns held 1.8 MiB (edges61)."""
        return self.cells <= max(self.rows, KEPT_CELLS)

    def figures(self) -> tuple[FloatArray, ...]:
        """(edges, p50, p90, mean) of the rows counted: each bin's figures from its counts."""
        stats = [counted_bin_stats(row) for row in self.per_bin]
        return self.edges, *(np.array([s[i] for s in stats]) for i in range(3))


def counts_of(prompt_tokens: IntArray, output_tokens: IntArray) -> PriorCounts | None:
    """The counts of these rows; None where there are none or they do not suit counting."""
    none = np.empty(0, dtype=np.int64)
    start = PriorCounts(none, np.empty(0), np.zeros((1, 1), dtype=np.int64), 0, prompt_tokens.dtype)
    return start.advanced(prompt_tokens, output_tokens, every=True)


def bins_of(n: int) -> FloatArray:
    """The quantile levels of the inner bin edges for ``n`` rows."""
    n_bins = max(1, min(MAX_BINS, n // MIN_BIN_ROWS))
    return np.linspace(0, 1, n_bins + 1)[1:-1]


def counted_bin_stats(counts: IntArray) -> tuple[float, float, float]:
    """(median, p90, mean) of the rows whose lengths ``counts`` counts (``counts[v]`` rows of length
    v), as numpy's median, quantile and mean of those rows give them."""
    values = np.flatnonzero(counts)
    cumulative = np.cumsum(counts[values])
    n = int(cumulative[-1])
    middle = _order_statistics(values, cumulative, [(n - 1) // 2, n // 2]).astype(np.float64)
    median = float(np.median(middle[:1] if n % 2 else middle))
    p90 = float(quantile_of(values, cumulative, np.array([0.9]), np.dtype(np.float64))[0])
    return median, p90, float(int((values * counts[values]).sum()) / n)


def _order_statistics(values: IntArray, cumulative: IntArray, ranks: list[int] | IntArray) -> IntArray:
    """The ``ranks``-th smallest (0-based) of rows counted as ``cumulative`` over sorted ``values``."""
    return values[np.searchsorted(cumulative, np.asarray(ranks), side="right")]


def quantile_of(values: IntArray, cumulative: IntArray, levels: FloatArray, dtype: np.dtype) -> FloatArray:
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


def without_empty_bins(
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

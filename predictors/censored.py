"""Truncated lengths are lower bounds: raise predictions for prompts cut at a cap that has since been raised.

A sample that stopped at its cap (finish_reason "length") says only that the prompt wanted *at least*
that many tokens: its length is right-censored. Every predictor here learns from the lengths as
observed (the model corrects the prompt's mean; the fallback is the mean itself), so a prompt whose
samples were all cut at 1,000 tokens is predicted at 1,000 even once the cap is raised to 8,000, as RL
recipes do between stages (DeepScaleR: 8k -> 16k -> 24k). Those are the longest prompts, which decide
the makespan, and the planner would under-plan exactly them.

The rule (``raise_censored``) applies to a query whose prompt, in the last step it ran, had at least
``CENSORED_SHARE`` of its samples truncated, and whose cap is above the largest cap those samples
were cut under:

- p50 is at least the old cut (the largest length one of them was cut at): at least half the
  samples ran past it, so the median did too;
- p90 is the new cap: those samples' tail was never observed, and the cap is the only bound known.
  Planning these prompts long costs little (they are placed and started first); planning them at the
  old cut is what made the makespan.

A prompt only partly cut, at least ``TAIL_SHARE`` of its last step's samples (more than a tenth ran
past the old cut), has its p90 held at the old cut at least: its 90th percentile lies past the cut
too. Without it the p90 of such a prompt could sit under the cut (predreview's probe: 957 under a cut
of 1,000), read from lengths of which the cut ones were only lower bounds. Its p50 is left, and the
p90 is not lifted to the cap: most samples finished below the cut, and what the cut ones would have
run to is unknown.

The last step, not all history, decides: once a prompt has run under the raised cap, its lengths
there are observed (or it is cut at the new cap, which is then no raise), and the rule stops.
Predictions are only ever raised, and only for those queries: with the cap unchanged or lowered (the
common case) nothing moves. Nor with the query's cap unknown (``NO_CAP``, what evaluation and training
give a row whose trace records no cap): a stand-in is no raise, and read as one it set the p90 of
every mostly truncated prompt to 2**31 - 1 tokens and lifted its p50 to the cut.
"""

from __future__ import annotations

import numpy as np

from predictors.queries import NO_CAP
from predictors.tracetable import FloatArray, IntArray

CENSORED_SHARE = 0.5  # truncated share of the prompt's last step from which the rule applies
TAIL_SHARE = 0.1  # truncated share from which the p90 is held at the old cut (1 - the p90's quantile)


def raise_censored(
    p50: FloatArray,
    p90: FloatArray,
    caps: IntArray,
    trunc_share: FloatArray,
    trunc_cap: FloatArray,
    trunc_len: FloatArray,
) -> tuple[FloatArray, FloatArray]:
    """(p50, p90) raised where a mostly (or, for the p90, partly) truncated prompt now runs under a
    higher cap (module docstring).

    Aligned with the queries, for the prompt's last step: ``trunc_share`` of its samples truncated
    (NaN or 0: no history), the largest cap they were cut under (``trunc_cap``) and the largest length
    they were cut at (``trunc_len``). Not clipped: the caller orders and clips the result."""
    cap = caps.astype(np.float64)
    with np.errstate(invalid="ignore"):
        raised = (cap > trunc_cap) & (cap < NO_CAP) & (trunc_len > 0)  # NO_CAP is no raise
        censored = (trunc_share >= CENSORED_SHARE) & raised
        tail = (trunc_share >= TAIL_SHARE) & raised
    if not np.any(tail):
        return p50, p90
    floor90 = np.where(censored, cap, np.where(tail, trunc_len, 0.0))
    return np.where(censored, np.maximum(p50, trunc_len), p50), np.maximum(p90, floor90)

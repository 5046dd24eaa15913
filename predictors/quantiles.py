"""Turning a (p50, p90) pair into the length at any quantile a planner asks for.

Models are fitted at p50 and p90 only. Lengths are close to log-normal within a prompt, so any other
quantile is read off the log-normal through those two points: ``q(t) = p50 * (p90/p50)^(z_t/z_0.9)``
with ``z`` the standard normal quantile. This interpolates between them, extrapolates smoothly
outside them (p99 grows with the spread, p10 shrinks with it), and returns p50 and p90 exactly.
Every value is clipped to [1, max_new_tokens]: a trajectory never emits fewer than one token or more
than its cap.

``PLANNING_QUANTILE`` (the median) is the one default every path plans on: ``LengthPredictor.predict``
without a quantile, the service's ``ROLLOUT_DEFAULT_QUANTILE`` and the replay's ``ReplayConfig``.
The predictor once defaulted to 0.9 while the other two planned on 0.5, so a caller leaving the
quantile out got p90 lengths by accident.
"""

from __future__ import annotations

from statistics import NormalDist

import numpy as np

from predictors.tracetable import FloatArray, IntArray
from scheduler.errors import InvalidInputError

Z90 = NormalDist().inv_cdf(0.9)
PLANNING_QUANTILE = 0.5  # the default planning quantile of the predictor, the service and the replay


def check_quantile(quantile: float) -> float:
    """The quantile, if it lies strictly between 0 and 1; a typed error otherwise."""
    if not 0.0 < quantile < 1.0:
        raise InvalidInputError("quantile", quantile, "must lie strictly between 0 and 1")
    return float(quantile)


def clip_lengths(values: FloatArray, caps: IntArray) -> FloatArray:
    """Lengths clipped to [1, cap]."""
    return np.clip(values, 1.0, caps.astype(np.float64))


def ordered(p50: FloatArray, p90: FloatArray, caps: IntArray) -> tuple[FloatArray, FloatArray]:
    """Clipped p50 and p90 with p90 >= p50 (independently fitted quantiles may cross)."""
    lo = clip_lengths(p50, caps)
    return lo, np.maximum(clip_lengths(p90, caps), lo)


def at_quantile(p50: FloatArray, p90: FloatArray, quantile: float, caps: IntArray) -> FloatArray:
    """The length at ``quantile`` on the log-normal through (p50, p90), clipped to [1, cap]."""
    check_quantile(quantile)
    z = NormalDist().inv_cdf(quantile) / Z90
    spread = np.log(np.maximum(p90, 1.0)) - np.log(np.maximum(p50, 1.0))
    return clip_lengths(np.maximum(p50, 1.0) * np.exp(z * spread), caps)

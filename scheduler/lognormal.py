"""A trajectory's length as a log-normal through its p50 and p90, held within ``[1, cap]``, without
overflow for any quantiles validation accepts.

Why. Validation accepts any positive finite quantile (``scheduler.validation``): a caller may send
p50 = 5e-324 with p90 = 1e300, or a p50 of 1e300 under a 600-token cap. Computed as
``p50 * exp(sigma * z)`` such a spread overflowed ``exp`` (numpy warned ``overflow encountered in
exp``, and with warnings as errors the plan failed), though every such draw ends at a bound anyway:
lengths are held within ``[1, cap]``, and ``cap`` is below 2**31.

How. The ratio p90 / p50 that overflows is taken as a difference of logs, so sigma is finite. A
draw is the usual ``p50 * exp(sigma * z)`` wherever both the exponent and the log-length stay within
``LOG_LIMIT`` (every sane spread: the same floats, to the last bit, as before); elsewhere it is
computed in log space, ``exp(clip(log p50 + sigma * z, 0, log cap))``, which is the bound that
draw would have been held to (or the exact length where the log form alone is finite).
"""

from __future__ import annotations

import math

import numpy as np

from scheduler.stepsum import FloatArray

Z90 = 1.2815515655446004  # the standard normal's 0.9 quantile
LOG_LIMIT = 700.0  # |x| past which exp(x) overflows float64 (709.78) or loses all precision


def sigma_through(p50: float, p90: float) -> float:
    """The log-normal sigma through ``p50`` and ``p90`` (0 when p90 is not above p50); finite for
    every positive finite pair, the ratio that overflows (1e300 / 5e-324) taken as a difference of
    logs."""
    ratio = p90 / p50
    if ratio < math.inf:
        return math.log(max(ratio, 1.0)) / Z90
    return (math.log(p90) - math.log(p50)) / Z90


def sigmas_through(p50s: FloatArray, p90s: FloatArray) -> FloatArray:
    """``sigma_through`` of every pair at once, the same float to the last bit (a plan's draws must
    not move with how its spreads were read): the division, the hold at 1 and the division by
    ``Z90`` are numpy's, which round as Python's floats do; the logs are ``math.log``'s, mapped
    without a Python frame, since numpy's ``log`` may differ from the C library's in the last bit
    (a SIMD build's own). A pair whose ratio is not below infinity (overflowed, NaN) or whose median
    is zero is the scalar's own call, in order: where it raises, the first error is the scalar's."""
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        ratios = p90s / p50s
    held = np.maximum(ratios, 1.0)  # NaN stays NaN, as max(nan, 1.0) does
    sigmas = np.fromiter(list(map(math.log, held.tolist())), dtype=np.float64, count=len(held)) / Z90
    scalar = ~(ratios < math.inf) | (p50s == 0.0)  # overflowed, NaN, or Python's ZeroDivisionError
    for k in np.flatnonzero(scalar).tolist():  # rare: of what validation accepts, a ratio that overflows
        sigmas[k] = sigma_through(float(p50s[k]), float(p90s[k]))
    return sigmas


def bounded_lengths(
    medians: FloatArray, sigmas: FloatArray, caps: FloatArray, normal: FloatArray
) -> FloatArray:
    """``min(cap, max(1, median * exp(sigma * z)))`` for every element of ``normal`` (standard
    normal draws, the last axis one trajectory each), in log space where the linear form would
    overflow (module docstring)."""
    exponent = sigmas * normal
    log_medians = np.log(medians)
    reach = np.abs(normal).max(initial=0.0) * sigmas  # the largest |exponent| of each trajectory
    linear = (reach <= LOG_LIMIT) & (np.abs(log_medians) + reach <= LOG_LIMIT)
    if linear.all():  # the usual case: no mask, the same arithmetic as ever
        return np.minimum(caps, np.maximum(1.0, medians * np.exp(exponent)))
    lengths = np.empty(np.broadcast_shapes(exponent.shape, caps.shape))
    lengths[..., linear] = np.minimum(
        caps[linear], np.maximum(1.0, medians[linear] * np.exp(exponent[..., linear]))
    )
    far = ~linear
    log_caps, log_lengths = np.log(caps[far]), log_medians[far] + exponent[..., far]
    inside = np.minimum(caps[far], np.exp(np.clip(log_lengths, 0.0, log_caps)))  # exp(0) is 1 exactly
    lengths[..., far] = np.where(log_lengths >= log_caps, caps[far], inside)  # exp(log cap) may miss cap
    return lengths

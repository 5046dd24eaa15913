"""Log-normal lengths through p50 and p90: any quantiles validation accepts draw without overflow, each
draw held within [1, cap], and a sane spread draws the same floats as the linear formula always did."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.lognormal import Z90, bounded_lengths, sigma_through, sigmas_through

POSITIVE = st.sampled_from([5e-324, 1e-300, 1e-9, 1.0, 7.0, 1e6, 1e300, 1.7976931348623157e308])
CAPS = st.sampled_from([1.0, 600.0, 2.0**31 - 1])


@settings(max_examples=200, deadline=None)
@given(p50=POSITIVE, p90=POSITIVE, cap=CAPS, seed=st.integers(0, 2**32 - 1))
def test_extreme_quantiles_draw_without_warnings_within_one_and_the_cap(
    p50: float, p90: float, cap: float, seed: int
) -> None:
    normal = np.random.default_rng(seed).standard_normal((32, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sigma = sigma_through(p50, p90)
        lengths = bounded_lengths(np.full(3, p50), np.full(3, sigma), np.full(3, cap), normal)
    assert math.isfinite(sigma)
    assert sigma >= 0.0
    assert np.all((lengths >= 1.0) & (lengths <= cap))


def test_a_draw_far_past_the_cap_is_the_cap_and_far_below_one_is_one() -> None:
    sigma = sigma_through(5e-324, 1e300)
    lengths = bounded_lengths(
        np.array([1.0]), np.array([sigma]), np.array([600.0]), np.array([[3.0], [-3.0]])
    )
    assert lengths.tolist() == [[600.0], [1.0]]


def test_a_ratio_that_overflows_gives_the_sigma_of_its_logs() -> None:
    assert sigma_through(5e-324, 1e300) == (math.log(1e300) - math.log(5e-324)) / Z90


def test_a_sane_spread_draws_the_floats_of_the_linear_formula() -> None:
    rng = np.random.default_rng(7)
    medians = rng.uniform(50.0, 3_000.0, 400)
    sigmas = np.array(
        [sigma_through(m, m * f) for m, f in zip(medians, rng.uniform(0.5, 4.0, 400), strict=True)]
    )
    caps, normal = np.full(400, 4_096.0), rng.standard_normal((32, 400))
    expected = np.minimum(caps, np.maximum(1.0, medians * np.exp(sigmas * normal)))
    assert np.array_equal(bounded_lengths(medians, sigmas, caps, normal), expected)


def test_a_mixed_batch_keeps_the_linear_floats_of_its_sane_trajectories() -> None:
    medians, caps = np.array([500.0, 1e300, 800.0]), np.full(3, 4_096.0)
    sigmas = np.array([sigma_through(500.0, 900.0), sigma_through(1e300, 1.7e308), 0.0])
    normal = np.random.default_rng(3).standard_normal((32, 3))
    lengths = bounded_lengths(medians, sigmas, caps, normal)
    sane = [0, 2]
    linear = np.minimum(caps[sane], np.maximum(1.0, medians[sane] * np.exp(sigmas[sane] * normal[:, sane])))
    assert np.array_equal(lengths[:, sane], linear)
    assert np.all(lengths[:, 1] == 4_096.0)  # a median of 1e300 under a 4,096 cap always draws the cap


ANY_FLOAT = st.one_of(st.floats(), POSITIVE, st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan]))


def _scalar_sigmas(pairs: list[tuple[float, float]]) -> np.ndarray | type[Exception]:
    """``sigma_through`` of each pair, or the type of the first error it raised."""
    try:
        return np.array([sigma_through(p50, p90) for p50, p90 in pairs], dtype=np.float64)
    except (ZeroDivisionError, ValueError) as error:
        return type(error)


@settings(max_examples=400, deadline=None)
@given(
    pairs=st.lists(
        st.one_of(
            st.tuples(POSITIVE, POSITIVE),
            st.tuples(st.floats(min_value=0.0, exclude_min=True), st.floats(min_value=0.0, exclude_min=True)),
            st.tuples(ANY_FLOAT, ANY_FLOAT),
        ),
        max_size=40,
    )
)
def test_the_sigmas_of_a_batch_are_the_scalar_s_to_the_bit(pairs: list[tuple[float, float]]) -> None:
    """Any quantiles, those validation accepts and those it refuses (zero, negative, infinite, NaN): the
    batch's sigmas are ``sigma_through``'s floats bit for bit, and where it raises so does the batch."""
    p50s = np.array([p50 for p50, _ in pairs], dtype=np.float64)
    p90s = np.array([p90 for _, p90 in pairs], dtype=np.float64)
    expected = _scalar_sigmas(pairs)
    if isinstance(expected, np.ndarray):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            sigmas = sigmas_through(p50s, p90s)
        assert np.array_equal(sigmas.view(np.uint64), expected.view(np.uint64))  # NaN and -0.0 included
    else:
        with pytest.raises(expected):  # the first pair's to raise, as the scalar's loop
            sigmas_through(p50s, p90s)


def test_a_median_of_zero_raises_as_the_scalar_division_does() -> None:
    with pytest.raises(ZeroDivisionError):
        sigma_through(0.0, 1.0)
    with pytest.raises(ZeroDivisionError):
        sigmas_through(np.array([1.0, -0.0]), np.array([2.0, 1.0]))

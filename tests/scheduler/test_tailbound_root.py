"""The tail bound's filling root (``kindlimits._filling_root``, edge49) where ``b`` (``c / m``) is huge:
the stable form keeps the root to the last bits where the textbook form lost it to cancellation.

Found by mutation testing (mutants13, docs/experiments.md): the textbook form for every ``b``, or
the stable one for negative ``b`` only, passed every test."""

from __future__ import annotations

import math

import pytest

from scheduler.kindlimits import _filling_root


def test_the_root_holds_where_b_dwarfs_the_rest() -> None:
    # 4 x 5^2 + 1e17 x 5 = 5e17 + 100: the root is 5 less 1e-15, which the textbook form gave as 4
    assert float(_filling_root(1e17, 8, 5e17)) == pytest.approx(5.0, abs=1e-9)


@pytest.mark.parametrize("b", [-3.0, 0.0, 3.0])
def test_the_root_of_a_modest_b_is_the_textbook_one(b: float) -> None:
    assert float(_filling_root(b, 8, 100.0)) == pytest.approx((math.sqrt(b * b + 1_600.0) - b) / 8)

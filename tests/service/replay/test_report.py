"""The replay report's Gantt panel titles show a makespan at a precision that tells steps apart."""

from __future__ import annotations

import pytest

from service.report import panel_title


@pytest.mark.parametrize(
    ("makespan_s", "shown"),
    [(0.42, "0.4"), (7.25, "7.2"), (99.94, "99.9"), (99.96, "100"), (100.0, "100"), (1234.6, "1,235")],
)
def test_a_panel_title_keeps_a_decimal_below_100_seconds(makespan_s: float, shown: str) -> None:
    # Whole seconds titled a sub-second step "lpt: makespan 0 s".
    assert panel_title("lpt", makespan_s) == f"lpt: makespan {shown} s"
